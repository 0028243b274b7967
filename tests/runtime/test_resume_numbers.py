"""Issue 27, item 4: a resumed run's numbers are honest.

After resuming at subnet 15 of 40 the progress bar runs 15/40 -> 40/40, the summary says it resumed and counts
the 25 subnets this invocation trained (its rate is over those), both rates say which time they count, and the
failure hint is a command that works (no ``--fault``).
"""

from __future__ import annotations

import io
import json
import re
import shlex

import pytest

from naspipe.cli import main
from naspipe.cli.cmd_train import summary_line
from naspipe.runtime.outputs import throughput_line
from naspipe.runtime.progress import RATE_LABEL, ProgressBar


def _resumed_metrics() -> dict:
    return {"subnets": 40, "resumed_at": 15, "trained_subnets": 25, "makespan_s": 2.5, "subnets_per_s": 10.0,
            "samples_per_s": 80.0, "wall_s": 5.0, "startup_s": 1.5, "utilization": 0.5, "overhead_share": 0.01,
            "config": {"policy": "csp", "space": "tiny-transformer", "stages": 2, "shared_layers": "serial"}}


def test_the_bar_of_a_resumed_run_starts_at_its_checkpoint_and_ends_at_the_total():
    out = io.StringIO()
    bar = ProgressBar(40, "csp tiny P=2", start=15, file=out)
    for written in (5, 17, 25):  # what stage 0 reports: subnets this invocation wrote
        bar.advance(written)
    bar.close()
    text = out.getvalue()
    frames = [f for f in re.split(r"[\r\n]+", text) if "/40" in f]
    assert "15/40" in frames[0] and "40/40" in frames[-1] and "resumed at 15" in text, text
    assert RATE_LABEL in text  # the bar's rate counts start-up, and says so


def test_a_fresh_bar_counts_from_zero():
    out = io.StringIO()
    bar = ProgressBar(8, "csp", file=out)
    bar.advance(8)
    bar.close()
    assert "0/8" in out.getvalue() and "8/8" in out.getvalue() and "resumed" not in out.getvalue()


def test_the_summary_of_a_resumed_run_counts_what_it_trained_and_labels_its_rate():
    line = summary_line(_resumed_metrics())
    assert "resumed at subnet 15: trained 25 subnets (15..39 of 40)" in line, line
    assert "10.00 subnets/s" in line and "start-up excluded" in line and "progress bar" in line, line
    assert " 40 subnets," not in line
    t = throughput_line(_resumed_metrics())
    assert t.startswith("resumed at subnet 15: trained 25 subnets"), t
    assert "(5.0 subnets per wall-clock second)" in t  # 25 / 5.0, not 40 / 5.0


def test_a_fresh_summary_is_unchanged_in_substance():
    m = dict(_resumed_metrics(), resumed_at=None, trained_subnets=40)
    assert "csp on tiny-transformer, 2 stages, trained 40 subnets, shared layers serial" in summary_line(m)


@pytest.mark.usefixtures("no_process_left_behind")
def test_resume_at_15_of_40_shows_15_to_40_and_the_rate_over_25(tmp_path, capsys):
    """A real run killed after its checkpoint at 15, its hint run as printed (no --fault), with a progress bar."""
    run = tmp_path / "run"
    common = ["--space", "tiny-transformer", "--stages", "2", "--subnets", "40", "--seed", "1",
              "--checkpoint-every", "15", "--timeout", "60"]
    assert main(["train", *common, "--no-progress", "--out", str(run), "--fault", "kill:1:20"]) == 1
    err = capsys.readouterr().err
    hint = re.search(r"to continue, run (naspipe train .*)$", err.strip().splitlines()[-1])
    assert hint is not None and "--fault" not in hint.group(1) and f"--resume {run}" in hint.group(1), err
    argv = [a for a in shlex.split(hint.group(1))[1:] if a != "--no-progress"]  # the hint, with a progress bar
    assert main(argv) == 0
    out, err = capsys.readouterr()
    frames = [f for f in re.split(r"[\r\n]+", err) if "/40" in f]
    assert "15/40" in frames[0] and "40/40" in frames[-1], err  # not 0/40 at the start, nor 25/40 at the end
    m = json.loads((run / "metrics.json").read_text())
    assert m["resumed_at"] == 15 and m["trained_subnets"] == 25
    assert m["subnets_per_s"] == pytest.approx(25 / m["makespan_s"])
    assert "resumed at subnet 15: trained 25 subnets (15..39 of 40)" in out, out
