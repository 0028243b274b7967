"""notebooks/08_your_own_supernet.ipynb runs headless: a supernet declared in a notebook cell is profiled,
simulated, trained on 2 stage processes (shipped by value with cloudpickle), verified bit for bit against the
reference, searched and reported (tests/notebooks/test_notebooks.py checks that it is committed clean)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.notebook_runner import PLOTLY_MIME, WIDGET_MIME, output_mime_types, plotly_titles, run_notebook

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "08_your_own_supernet.ipynb"


@pytest.mark.slow
def test_08_your_own_supernet(tmp_path):
    params = {"SUBNETS": 8, "LAYERS": 3, "BUDGET": 4, "REPEATS": 1, "OUT": str(tmp_path / "runs")}
    nb = run_notebook(NOTEBOOK, params, timeout=240, cwd=tmp_path)
    print(f"\n08_your_own_supernet: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[WIDGET_MIME] >= 1  # the live monitor
    assert any("simulated, 2 stages" in t for t in plotly_titles(nb))
    assert mimes[PLOTLY_MIME] >= 1
    search = next(c for c in nb.cells if c.cell_type == "code" and "search_run(" in c.source)
    assert [o.output_type for o in search.outputs] == ["stream"], "the best subnet shown once, in the summary"
    assert search.outputs[0].text.count("best:") == 1
    report = next(c for c in nb.cells if c.cell_type == "code" and "write_report(" in c.source)
    link = next(o for o in report.outputs if o.output_type == "display_data")["data"]["text/html"]
    assert "naspipe-report-" in link and 'target="_blank"' in link  # opens a full tab, not the sandboxed viewer
    cell = next(c for c in nb.cells if c.cell_type == "code" and "nb201_digits.supernet()" in c.source)
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    assert "REPRODUCIBLE: identical: 8 subnets" in text and "messages per stage boundary: 0->1 " in text, text
    last = next(o for o in nb.cells[-1].outputs if o.output_type == "stream")
    result = json.loads(last.text.strip().splitlines()[-1])
    assert result["verified"], result["message"]
    assert result["message"].startswith("identical: 8 subnets")
    assert set(result["best"]) == {"layer0", "layer1", "layer2"}
    assert result["profiled"] == ["head", "layer0", "layer1", "layer2", "stem"]
    assert Path(result["report"]).is_file()
