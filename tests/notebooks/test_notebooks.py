"""The notebooks run headless with small parameters and produce their figures; they are committed clean."""

from __future__ import annotations

import fnmatch
import functools
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.helpers.notebook_runner import (
    PLOTLY_MIME,
    WIDGET_MIME,
    has_outputs,
    inject_parameters,
    output_mime_types,
    outputs_of,
    plotly_titles,
    run_notebook,
)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ALL = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_every_notebook_is_found():
    assert len(ALL) >= 7 and "07_context_switching.ipynb" in ALL


@pytest.mark.parametrize("name", ALL)
def test_notebook_is_committed_clean_and_parameterised(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert not has_outputs(nb), f"{name} must be committed without outputs"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "parameters" in first_code.metadata.get("tags", [])


ROOT = NOTEBOOKS.parent
# a path (``benchmarks/quality.py``, ``../data/spaces/small-mlp.json``), a repository document or module
# named bare (``TECHNIQUES.md``, ``spos_digits.py``), a notebook by its stem, a ``naspipe.x.y`` name
_PATH = re.compile(r"(?<![\w/.])((?:\.\./)?[A-Za-z_][\w.*-]*(?:/[\w.*-]+)*/[\w*-]+\.[a-z]+)\b")
_BARE = re.compile(r"(?<![\w/.-])([\w-]+\.(?:md|ipynb|py|toml|ya?ml|txt))\b")
_STEM = re.compile(r"(?<![\w/])(\d\d_[a-z_]+[a-z])\b")
_DOTTED = re.compile(r"\b(naspipe(?:\.[A-Za-z_]\w*)+)")
_WRITTEN = ("runs/", "RUN_DIR/", "OUT/", "docs/figures/")  # what a run writes, not what the repository holds


@functools.cache
def _tracked() -> frozenset[Path]:
    """The repository's files (``git ls-files``, asked once a process)."""
    return frozenset(Path(p) for p in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                                     check=True).stdout.split())


def _exists(name: str) -> bool:
    name = name.rstrip(".,:;)")
    if name.startswith(_WRITTEN) or "/" not in name and "." not in name:
        return True
    tracked = _tracked()
    if "/" not in name:
        return any(p.name == name for p in tracked)
    for base in (ROOT, NOTEBOOKS):
        target = os.path.normpath(base / name)
        if any(fnmatch.fnmatch(str(ROOT / p), target) or str(ROOT / p).startswith(target + os.sep) for p in tracked):
            return True
    return False


def _importable(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def missing_names(text: str) -> list[str]:
    """Files, notebooks and naspipe names that ``text`` mentions and the repository does not hold."""
    bad = [m for m in _PATH.findall(text) if not _exists(m)]
    bad += [m for m in _BARE.findall(text) if not _exists(m)]
    bad += [m for m in _STEM.findall(text) if not (NOTEBOOKS / f"{m}.ipynb").is_file()]
    bad += [m for m in _DOTTED.findall(text) if not _importable(m)]
    return bad


def test_the_name_check_finds_what_is_missing():
    assert missing_names("see TECHNIQUES.md sections 4-6") == ["TECHNIQUES.md"]
    assert missing_names("`benchmarks/nothing.py` and 09_nowhere") == ["benchmarks/nothing.py", "09_nowhere"]
    assert missing_names("`naspipe.sim.bound.no_such_thing`") == ["naspipe.sim.bound.no_such_thing"]
    assert not missing_names("`benchmarks/quality.py`, ../data/spaces/small-mlp.json, 07_context_switching, "
                             "`naspipe.sim.bound.lower_bound`, runs/quickstart, README.md, weights-stage*.pt")


@pytest.mark.parametrize("name", ALL)
def test_notebook_names_no_file_outside_the_repository(name):
    """Every file, notebook and naspipe name a notebook points readers to is in the repository."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert not missing_names("\n".join(c.source for c in nb.cells))


def test_runner_injects_parameters_and_uses_this_interpreter(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("A = 1\nB: int = 2", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import os, sys\nprint(A, B, sys.executable, os.environ.get('PYTEST_CURRENT_TEST'))"),
        nbformat.v4.new_code_cell("import json\nfrom ipykernel.connect import get_connection_info\n"
                                  "print(json.loads(get_connection_info())['transport'])"),
    ])
    path = tmp_path / "t.ipynb"
    nbformat.write(nb, path)
    out = run_notebook(path, {"A": 5}, timeout=60)
    text = out.cells[2].outputs[0].text.split()
    assert text == ["5", "2", sys.executable, "None"]
    assert out.cells[3].outputs[0].text.split() == ["ipc"]  # Unix sockets: no TCP port another test can take
    assert out.cells[1].metadata["tags"] == ["injected-parameters"]
    with pytest.raises(KeyError, match="unknown notebook parameter"):
        inject_parameters(nbformat.read(path, as_version=4), {"C": 1})


def test_02_csp_explained():
    nb = run_notebook(NOTEBOOKS / "02_csp_explained.ipynb", {"SUBNETS": 8, "STEPS": 8}, timeout=120)
    print(f"\n02_csp_explained: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[PLOTLY_MIME] >= 6  # sharing table, DAG, Gantt of four policies, summary table, two samplers
    assert mimes[WIDGET_MIME] >= 1  # the schedule slider
    titles = plotly_titles(nb)
    assert any(t.startswith("causal DAG") for t in titles)
    assert any("four policies" in t for t in titles)
    assert any("uniform and fair sequences side by side" in t for t in titles)


def test_05_scaling(executed_notebook):
    # run once a session with {"KS": [12, 48], "STAGES": [4, 8], "SUBNETS": 30} (tests/helpers/runs.py); the
    # browser test shows the same run
    nb = nbformat.read(executed_notebook("05_scaling"), as_version=4)
    print(f"\n05_scaling: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[PLOTLY_MIME] >= 4  # a figure and a table per space family
    figs = outputs_of(nb, PLOTLY_MIME)
    assert any(any(d.get("name", "").startswith("paper") for d in f["data"]) for f in figs)


def test_07_context_switching(executed_notebook):
    # run once a session with {"SUBNETS": 40, "BUDGETS": ["25%", "10%"], "TREND_KS": [12, 96], "TREND_SUBNETS": 30}
    # (tests/helpers/runs.py); the browser test shows the same run
    nb = nbformat.read(executed_notebook("07_context_switching"), as_version=4)
    print(f"\n07_context_switching: {nb.metadata['naspipe_test']['seconds']:.1f} s")
    mimes = output_mime_types(nb)
    assert mimes["error"] == 0
    assert mimes[PLOTLY_MIME] >= 6  # budgets, their table, two hit-rate figures, the Gantt, the trend table
    figs = outputs_of(nb, PLOTLY_MIME)
    assert any("hit rate and stalls" in t for t in plotly_titles(nb))
    kinds = {d.get("name") for f in figs for d in f["data"]}
    assert {"prefetch", "stall"} & kinds, kinds


def test_live_monitor_in_a_headless_kernel(tmp_path):
    """The monitor inside a kernel: widgets shown, a writer thread feeds events.jsonl, follow() blocks."""
    src = '''import json, threading, time
from pathlib import Path
from naspipe import RunSpec, UniformStream, partition, preset, simulate
from naspipe.viz import LiveMonitor
sp = preset("naspipe-k48"); part = partition(sp, 4)
trace = simulate(RunSpec.of(sp, part, UniformStream(sp, 0, 16), "csp")).trace
path = Path("events.jsonl")
def write():
    with path.open("w") as f:
        for e in sorted(trace.events, key=lambda e: e.end):
            f.write(json.dumps(e.to_dict()) + "\\n"); f.flush(); time.sleep(0.002)
mon = LiveMonitor(4, 16, refresh=0.05)
mon.display()
threading.Thread(target=write).start()
mon.follow(path, timeout=30)
print(mon.widget is not None, mon.done_subnets, len(mon.events))'''
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src)])
    path = tmp_path / "monitor.ipynb"
    nbformat.write(nb, path)
    out = run_notebook(path, timeout=60)
    mimes = output_mime_types(out)
    assert mimes[WIDGET_MIME] == 1 and mimes["error"] == 0
    assert out.cells[0].outputs[-1].text.split() == ["True", "16", "128"]
    # where widgets do not draw (the notebook opened executed, untrusted), a line, not "VBox(children=(HBox(..."
    plain = next(o.data["text/plain"] for o in out.cells[0].outputs if WIDGET_MIME in o.get("data", {}))
    assert plain.startswith("naspipe live monitor (naspipe LiveMonitor, widgets: drawn only") and "VBox" not in plain
