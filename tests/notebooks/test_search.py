"""notebooks/06_search.ipynb runs headless with tiny parameters and draws its accuracy-versus-cost figures
(tests/notebooks/test_notebooks.py checks that every notebook is committed clean)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.notebook_runner import PLOTLY_MIME, output_mime_types, outputs_of, run_notebook

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_search.ipynb"


def test_06_search_runs_and_plots():
    nb = run_notebook(NOTEBOOK, {"SUBNETS": 30, "BUDGET": 6, "HELDOUT": 2}, timeout=120)
    print(f"\n06_search: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    assert output_mime_types(nb)["error"] == 0
    figs = outputs_of(nb, PLOTLY_MIME)
    assert len(figs) == 2
    titles = [f["layout"]["title"]["text"] for f in figs]
    assert titles[0] == "digits-cnn: held-out accuracy against parameters"
    names = [t.get("name", "") for t in figs[0]["data"]]
    assert "chosen by evolution" in names and "chosen by random" in names
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert "evolution search on digits-cnn: 6 subnets evaluated" in text
