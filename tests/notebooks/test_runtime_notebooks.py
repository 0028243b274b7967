"""The notebooks that train for real (01_quickstart, 03_reproducibility) run headless with tiny parameters.

They start stage processes, so they are the slow notebooks: a few subnets on 2 stages each (about half a
minute together on an idle 2-core machine, most of it the stage processes' start-up). Outputs are checked
by mime type and through the JSON line each notebook prints in its last cell; widget state is not stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from tests.helpers.notebook_runner import (
    PLOTLY_MIME,
    WIDGET_MIME,
    output_mime_types,
    outputs_of,
    plotly_titles,
    run_notebook,
)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def last_json(nb) -> dict:
    """The JSON object printed by the notebook's last code cell."""
    cell = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    return json.loads(text.strip().splitlines()[-1])


def test_01_quickstart(tmp_path):
    params = {"STAGES": 2, "SUBNETS": 6, "OUT": str(tmp_path / "runs")}
    nb = run_notebook(NOTEBOOKS / "01_quickstart.ipynb", params, timeout=240, cwd=tmp_path)
    print(f"\n01_quickstart: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[WIDGET_MIME] >= 1  # the live monitor
    assert mimes[PLOTLY_MIME] >= 2  # the hash table and the measured-vs-simulated Gantt
    t = plotly_titles(nb)
    assert any(x.startswith("run digests") for x in t)
    assert any("measured vs simulated" in x for x in t)
    gantt = next(f for f in outputs_of(nb, PLOTLY_MIME) if "measured vs simulated" in f["layout"]["title"]["text"])
    assert any(d.get("type") == "bar" and d.get("hovertext") for d in gantt["data"])
    result = last_json(nb)
    assert result["verified"], result["message"]
    assert result["hash"] == result["reference_hash"] and result["stages"] == 2
    assert Path(result["report"]).is_file() and Path(result["report"]).stat().st_size > 10_000
    assert (tmp_path / "runs" / "csp" / "events.jsonl").is_file()
    assert not list(tmp_path.rglob("*.pt")), "nothing in the quickstart reads weights: it writes none"
    rates = next(c for c in nb.cells if c.cell_type == "code" and "result.summary()" in c.source)
    assert "subnets/s" in rates.outputs[0].text and "first task to last task" in rates.outputs[0].text


def test_03_reproducibility(executed_notebook):
    # run once a session with {"SUBNETS": 6, "STAGE_COUNTS": [1, 2], "REPEATS": 2, "JITTER_MS": [2.0],
    # "HAZARD_STAGES": 2} (tests/helpers/runs.py); the browser test shows the same run
    nb = nbformat.read(executed_notebook("03_reproducibility"), as_version=4)
    print(f"\n03_reproducibility: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[PLOTLY_MIME] >= 4  # two hash tables, the jitter Gantt, the loss curves
    tables = [f for f in outputs_of(nb, PLOTLY_MIME) if f["data"] and f["data"][0].get("type") == "table"]
    assert len(tables) == 2
    result = last_json(nb)
    h = result["hashes"]
    csp = {k: v for k, v in h.items() if k.startswith("csp-") and "dense" not in k}
    assert set(csp) == {"csp-1st", "csp-2st", "csp-2st-repeat1", "csp-2st-jitter2ms"}
    assert set(csp.values()) == {h["reference"]}  # every CSP run: the reference's bits
    assert h["csp-dense-2st"] == h["reference (conflict-dense)"]
    assert h["asp-dense-2st"] != h["reference (conflict-dense)"]  # the asynchronous hazard
    assert result["all_reproducible"] and result["hazard_differs"] and result["runs"] == 6
