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
    text = capsys.readouterr().out
    assert "verify csp vs reference: identical: 12 subnets" in text
    assert text.count("identical") >= 3  # both runs in the table, and the verify line
    for f in ("csp/gantt.html", "csp/report.html", "reference/losses.csv", "reference/params.json"):
        assert (out / f).is_file(), f
    ref = json.loads((out / "reference" / "metrics.json").read_text())
    assert ref["command"] == "reference" and ref["subnets"] == 12 and ref["wall_s"] > 0
