"""``naspipe simulate``: the JSON summary, trace files, replay, and one clean line plus exit 2 per bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runspec.spec import RunSpec
from naspipe.sched.trace import Trace
from naspipe.sequences.sequence import UniformStream, save_sequence
from naspipe.sim import simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset
from tests.helpers.fresh_command import run_fresh
from tests.helpers.plans import few_plans

REQUIRED = ("policy", "stages", "subnets", "makespan", "utilization", "lower_bound", "efficiency", "throughput")
VOLATILE = ("sim_seconds", "decision_us_mean")  # wall-clock measurements


def _json(capsys, *args: str) -> dict:
    rc = main(["simulate", *args, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1  # exactly one object
    return json.loads(lines[0])


def test_json_summary_has_the_required_fields(capsys) -> None:
    out = _json(capsys, "--space", "naspipe-k48", "--stages", "4", "--subnets", "200", "--seed", "3")
    for key in REQUIRED:
        assert key in out, key
    # the default, csp-plan, reports the plan it chose (30 plans simulated at 200 subnets; plan 0 is csp-cp)
    assert out["policy"] == f"csp-plan:plan={out['plan']['plan']},eps=0.2" and out["plan"]["tries"] == 30
    assert out["makespan"] == out["plan"]["makespan"] <= out["plan"]["plan0_makespan"]
    assert out["stages"] == 4 and out["subnets"] == 200
    assert 0 < out["utilization"] <= 1
    assert 0 < out["efficiency"] <= 1
    assert out["efficiency"] == pytest.approx(out["lower_bound"] / out["makespan"])
    assert out["throughput"] == pytest.approx(200 / out["makespan"])
    assert out["shared_layers"] == "frozen" and out["window"] == 200  # a preset: auto is frozen


def test_json_matches_the_library(capsys) -> None:
    out = _json(capsys, "--space", "naspipe-k12", "--stages", "2", "--subnets", "50", "--seed", "1",
                "--policy", "asp", "--window", "8", "--sampler", "uniform")
    sp = preset("naspipe-k12")
    r = simulate(RunSpec.of(sp, partition(sp, 2), UniformStream(sp, 1, 50), "asp", window=8))
    assert out["makespan"] == pytest.approx(r.makespan)
    assert out["utilization"] == pytest.approx(r.utilization)


def test_same_command_same_numbers(capsys) -> None:
    args = ("--space", "naspipe-k24", "--stages", "4", "--subnets", "100", "--jitter", "0.2", "--policy", "csp-bw")
    a, b = _json(capsys, *args), _json(capsys, *args)
    for k in VOLATILE:
        a.pop(k), b.pop(k)
    assert a == b


@pytest.mark.parametrize("policy", ["sequential", "csp", "csp-chain", "csp-cp", "csp-plan:plan=3", "csp-bw", "bsp",
                                    "bsp:3", "asp"])
def test_every_policy_runs(capsys, policy: str) -> None:
    out = _json(capsys, "--space", "tiny-transformer", "--stages", "3", "--subnets", "30", "--policy", policy,
                "--shared-layers", "delayed:2")
    assert out["policy"] == policy and out["shared_layers"] == "delayed:2"


def test_text_summary(capsys) -> None:
    assert main(["simulate", "--space", "unit-k12", "--subnets", "40"]) == 0
    out = capsys.readouterr().out
    assert "csp-plan:plan=" in out and ",eps=0.2 on unit-k12, 4 stages, 40 subnets" in out
    assert "utilization" in out and "efficiency" in out
    assert re.search(r"; reuse distance min \d+, mean \d+\.\d\n", out), out
    assert main(["simulate", "--space", "unit-k12", "--subnets", "1", "--stages", "2"]) == 0
    assert "; no candidate reused\n" in capsys.readouterr().out  # (one subnet: no distance, not "min None")


@few_plans()  # which plan wins is not the point here
def test_trace_files_and_replay(tmp_path, capsys) -> None:
    sp = preset("naspipe-k12")
    seq = tmp_path / "seq.json"
    save_sequence(UniformStream(sp, 7, 60), seq)
    tr, ch = tmp_path / "trace.json", tmp_path / "chrome.json"
    replay = _json(capsys, "--space", "naspipe-k12", "--subnets", "40", "--sequence", str(seq),
                   "--trace", str(tr), "--chrome-trace", str(ch))
    seeded = _json(capsys, "--space", "naspipe-k12", "--subnets", "40", "--seed", "7", "--sampler", "uniform")
    assert replay["makespan"] == seeded["makespan"]  # the first 40 of the file are the seed-7 sequence
    t = Trace.load(tr)
    assert t.makespan == pytest.approx(replay["makespan"]) and t.subnets() == 40
    assert json.loads(ch.read_text())["traceEvents"]


def test_space_from_a_json_file(tmp_path, capsys) -> None:
    p = tmp_path / "space.json"
    p.write_text(preset("digits-cnn").to_json())
    out = _json(capsys, "--space", str(p), "--stages", "2", "--subnets", "10")
    assert out["space"] == "digits-cnn"


# ---- bad input: one line on stderr, exit code 2, no traceback ---------------------------------------
def _files(tmp_path: Path) -> dict[str, str]:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x",\n "blocks": [\n')
    field = tmp_path / "field.json"
    field.write_text(json.dumps({"name": "x", "blocks": [{"candidates": [{"fwd": -1}]}]}))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    return {"BAD": str(bad), "FIELD": str(field), "BINARY": str(binary), "MISSING": str(tmp_path / "missing.json"),
            "NODIR": str(tmp_path / "no" / "such" / "dir" / "t.json")}


BAD_INPUT = {
    "unknown space": (["--space", "naspipe-huge"], "unknown space 'naspipe-huge'"),
    "unknown policy": (["--policy", "gpipe"], "unknown policy 'gpipe'"),
    "stages 0": (["--stages", "0"], "--stages must be >= 1"),
    "stages > blocks": (["--stages", "51"], "cannot split 50 blocks"),
    "non-integer stages": (["--stages", "two"], "--stages"),
    "window 0": (["--window", "0"], "--window must be >= 1"),
    "negative jitter": (["--jitter", "-0.1"], "--jitter must be a finite number >= 0"),
    "jitter 1": (["--jitter", "1"], r"--jitter must lie in \[0, 1\)"),
    "jitter above 1": (["--jitter", "2.5"], r"--jitter must lie in \[0, 1\)"),
    "NaN jitter": (["--jitter", "nan"], "--jitter"),
    "malformed space JSON": (["--space", "BAD"], r"bad\.json: not valid JSON \(line 3"),
    "malformed space field": (["--space", "FIELD"], r"field\.json: blocks\[0\]\.candidates\[0\]: field 'fwd'"),
    "missing space file": (["--space", "MISSING"], "cannot read space file"),
    "undecodable space file": (["--space", "BINARY"], r"binary\.json"),
    "bad shared layers": (["--shared-layers", "sometimes"], "unknown shared-layer policy 'sometimes'"),
    "delayed without D": (["--shared-layers", "delayed"], "use delayed:D"),
    "non-integer subnets": (["--subnets", "2.5"], "--subnets must be a whole number"),
    "zero subnets": (["--subnets", "0"], "--subnets must be >= 1"),
    "bad policy argument": (["--policy", "bsp:0"], "bad policy argument"),
    "missing sequence file": (["--sequence", "MISSING"], "cannot read sequence file"),
    "negative latency": (["--latency", "-1"], "--latency must be a finite number >= 0"),
    "unknown option": (["--frobnicate"], "unrecognized arguments"),
    "unwritable trace path": (["--trace", "NODIR"], "t.json"),
    "unwritable chrome-trace path": (["--chrome-trace", "NODIR"], "t.json"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path, capsys) -> None:
    args, message = BAD_INPUT[case]
    files = _files(tmp_path)
    argv = ["simulate", "--subnets", "20", *[files.get(a, a) for a in args]]
    try:
        rc = main(argv)
    except SystemExit as e:  # pragma: no cover - main must not exit itself
        pytest.fail(f"main() raised SystemExit({e.code}) instead of returning 2")
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("naspipe: error: ")
    assert re.search(message, lines[0]), lines[0]
    assert "Traceback" not in err and out == ""


def test_console_script_in_a_subprocess(tmp_path) -> None:
    exe = Path(sys.executable).with_name("naspipe")
    ok = subprocess.run([str(exe), "simulate", "--space", "unit-k24", "--subnets", "50", "--json"],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert all(k in out for k in REQUIRED)
    bad = subprocess.run([str(exe), "simulate", "--stages", "0"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "naspipe: error: --stages must be >= 1, got 0"
    assert bad.stdout == ""


def test_simulate_never_imports_torch(tmp_path) -> None:
    """DESIGN.md: the scheduling core and the simulator never import torch; ``naspipe simulate`` needs none."""
    r = run_fresh(["simulate", "--space", "unit-k12", "--subnets", "20", "--json"], tmp_path)
    assert r.code == 0 and not r.imported_torch, r.stderr[-2000:]


def test_output_piped_into_a_reader_that_leaves_early_ends_without_a_traceback(tmp_path):
    """``naspipe simulate --json | true``: the reader is gone before the JSON is written; no traceback."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    naspipe = Path(sys.executable).parent / "naspipe"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    if shutil.which("true") is None:
        pytest.skip("no true here")
    p = subprocess.run(f"'{naspipe}' simulate --space digits-cnn --subnets 40 --json | true",
                       shell=True, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
