"""notebooks/09_trust_your_search.ipynb runs headless: the shipped truth, a live supernet, its rank with floors."""

from __future__ import annotations

from pathlib import Path

import nbformat

from tests.helpers.notebook_runner import PLOTLY_MIME, WIDGET_MIME, output_mime_types, plotly_titles

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "09_trust_your_search.ipynb"
TRUTH = ROOT / "data" / "truth" / "digits-truth"


def test_09_trust_your_search(executed_notebook):
    # run once a session with the shipped truth, {"SUBNETS": 24, "STAGES": 2, "FLOOR_SEEDS": 1}
    # (tests/helpers/runs.py); the browser test shows the same run
    nb = nbformat.read(executed_notebook(NOTEBOOK.stem), as_version=4)
    print(f"\n09_trust_your_search: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[WIDGET_MIME] >= 1  # the live monitor
    titles = plotly_titles(nb)
    assert any(t.startswith("supernet (24 subnets") for t in titles)
    assert any(t.startswith("Kendall tau vs the truth") for t in titles)
    assert any(t.startswith("The length curve on digits-truth") for t in titles)  # from the shipped JSON
    assert any(t.startswith("Ranking methods on digits-truth: stand-alone accuracy (x) vs the method's score")
               for t in titles)  # benchmarks/results/ranking_methods.json, one figure of subplots
    assert mimes[PLOTLY_MIME] == 4
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "floor (a), truth seed vs seed Kendall tau" in text
    assert "(b) supernet seed vs seed" in text and "regret of the pick" in text
    assert "the search picks " in text
    assert "powered length: 800 subnets; uniform 800, fair 400, spread 800" in text
