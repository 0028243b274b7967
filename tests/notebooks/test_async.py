"""notebooks/04_async_corrections.ipynb runs headless with tiny parameters and draws its figures."""

from __future__ import annotations

from pathlib import Path

import nbformat

from tests.helpers.notebook_runner import PLOTLY_MIME, output_mime_types, outputs_of

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04_async_corrections.ipynb"


def test_04_async_corrections_runs_and_plots(executed_notebook):
    # run once a session with {"SUBNETS": 12, "EVAL_SUBNETS": 3, "STAGES": 2} (tests/helpers/runs.py); the
    # browser test shows the same run
    nb = nbformat.read(executed_notebook(NOTEBOOK.stem), as_version=4)
    print(f"\n04_async_corrections: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    assert output_mime_types(nb)["error"] == 0
    figs = outputs_of(nb, PLOTLY_MIME)
    assert len(figs) == 2
    names = [t.get("name", "") for t in figs[0]["data"]]
    assert names[0] == "sequential reference" and "pipedream" in names and "pipeoptim" in names
    assert figs[0]["layout"]["title"]["text"].startswith("training loss")
    # the project's one theme (plotly_white, as every other notebook), not plotly's grey default
    assert all(f["layout"]["template"]["layout"]["plot_bgcolor"] == "white" for f in figs)
    assert figs[1]["data"][0]["type"] == "table" and figs[1]["layout"]["height"] < 300  # no blank space under it
