"""``naspipe demo`` (what ``make demo`` runs), small: CSP and the sequential policy on stage processes, the
reference, verification, summary, Gantt and report."""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def test_demo_trains_verifies_and_summarises(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--subnets", "12", "--stages", "2", "--out", str(out)]) == 0
    text, err = capsys.readouterr()
    # the frozen shared layers are said once, with what a demo user can do (the demo takes no --shared-layers)
    assert err.count("shared layers") == 1 and "shared_layers=" not in err, err
    assert "note: the shared layers (input, head) stay frozen in both runs" in err
    assert "verify csp vs reference: identical: 12 subnets" in text
    assert text.count("identical") >= 3  # both runs in the table, and the verify line
    assert "x the subnets/s of the sequential policy" in text and "naspipe verify" in text
    for f in ("csp/gantt.html", "csp/report.html", "reference/losses.csv", "reference/params.json"):
        assert (out / f).is_file(), f
    assert not list(out.rglob("*.pt")), "no step of the demo reads weights: it writes none"
    ref = json.loads((out / "reference" / "metrics.json").read_text())
    assert ref["command"] == "reference" and ref["subnets"] == 12 and ref["wall_s"] > 0
