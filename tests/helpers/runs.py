"""Trained runs several test modules read, made once per session (a pytest plugin loaded by tests/conftest.py),
and each worker's warm ``naspipe`` for tests that run many commands.

A fixture here only trains and returns folders; tests that change a run copy it first. Under pytest-xdist the
workers of one session share the folders: the first to ask trains them under a file lock, the others wait for it
and read them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from naspipe.cli import main
from tests.helpers.refusals import TINY
from tests.helpers.warm_naspipe import WarmNaspipe


@pytest.fixture(scope="session")
def warm(tmp_path_factory) -> Iterator[WarmNaspipe]:  # noqa: ANN001
    """This worker's warm ``naspipe`` (tests/helpers/warm_naspipe.py): commands without a fresh torch import."""
    w = WarmNaspipe(tmp_path_factory.mktemp("warm"))
    yield w
    w.close()


def _shared(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:  # noqa: ANN001
    """``name`` under this session's temporary folder (the one all xdist workers share), made once by ``make``."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's basetemp is a folder of the session's
    d = root / name
    with FileLock(str(d) + ".lock", timeout=900):
        if not (d / ".done").exists():
            shutil.rmtree(d, ignore_errors=True)  # what a failed first try left
            d.mkdir()
            make(d)
            (d / ".done").touch()
    return d


@pytest.fixture(scope="session")
def two_thread_runs(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    """tiny-transformer, 8 subnets: a 2-stage train and a reference with 2 threads, and a reference with 1."""

    def make(d: Path) -> None:
        assert main(["train", *TINY, "--stages", "2", "--threads", "2", "--out", str(d / "train2")]) == 0
        assert main(["reference", *TINY, "--threads", "2", "--out", str(d / "ref2")]) == 0
        assert main(["reference", *TINY, "--out", str(d / "ref1")]) == 0

    d = _shared(tmp_path_factory, "two_thread_runs", make)
    return {"train2": d / "train2", "ref2": d / "ref2", "ref1": d / "ref1"}


# The figure notebooks the headless tests (tests/notebooks) check as data and the browser test
# (tests/browser) only shows: executed once per session with these parameters, the executed copy read by both.
FIGURE_NOTEBOOKS = {
    "03_reproducibility": {"SUBNETS": 6, "STAGE_COUNTS": [1, 2], "REPEATS": 2, "JITTER_MS": [2.0],
                           "HAZARD_STAGES": 2},
    "04_async_corrections": {"SUBNETS": 12, "EVAL_SUBNETS": 3, "STAGES": 2},
    "05_scaling": {"KS": [12, 48], "STAGES": [4, 8], "SUBNETS": 30},  # 8 curves + the paper: 9 legend entries
    "07_context_switching": {"SUBNETS": 40, "BUDGETS": ["25%", "10%"], "TREND_KS": [12, 96],
                             "TREND_SUBNETS": 30},  # 9 table rows
    "09_trust_your_search": {"SUBNETS": 24, "STAGES": 2, "FLOOR_SEEDS": 1},
}


@pytest.fixture(scope="session")
def executed_notebook(tmp_path_factory) -> Callable[[str], Path]:  # noqa: ANN001
    """``executed_notebook("05_scaling")``: the path of ``05_scaling.ipynb`` run headless (outputs kept, widget
    state stored) with ``FIGURE_NOTEBOOKS``' parameters; what it writes under ``runs/`` beside it."""
    import nbformat  # (here: the suite's controller loads this plugin too, and needs no notebook)

    from tests.helpers.notebook_runner import ROOT, parameter_names, parameters_cell, run_notebook

    def get(stem: str) -> Path:
        def make(d: Path) -> None:
            params = dict(FIGURE_NOTEBOOKS[stem])
            if stem.startswith("09"):
                params = {"TRUTH": str(ROOT / "data" / "truth" / "digits-truth"),
                          "SPACE": str(ROOT / "data" / "spaces" / "digits-truth.json"),
                          "CURVE": str(ROOT / "benchmarks" / "results" / "trust_curve.json"),
                          "METHODS": str(ROOT / "benchmarks" / "results" / "ranking_methods.json"), **params}
            path = ROOT / "notebooks" / f"{stem}.ipynb"
            clean = nbformat.read(path, as_version=4)
            if "OUT" in parameter_names(clean.cells[parameters_cell(clean)].source):
                params["OUT"] = str(d / "runs")
            nb = run_notebook(path, params, timeout=240, cwd=d,
                              store_widget_state=True)
            nbformat.write(nb, d / f"{stem}.ipynb")

        return _shared(tmp_path_factory, f"notebook_{stem}", make) / f"{stem}.ipynb"

    return get


# The runs behind golden digests kept per kernels kind (tests/helpers/per_cpu.py): name -> `naspipe reference`
# arguments. tests/supernet/test_runs.py (the presets as before the supernet API) and tests/runtime/test_replicas.py
# (--replicas 1 as before replicas) compare their params.json with the recorded digests.
PINNED_RUNS = {
    **{f"{p}-30": ["--space", p, "--subnets", "30", "--seed", "0", "--shared-layers", "frozen"]
       for p in ("digits-cnn", "sparse-mlp", "tiny-transformer")},
    **{f"{p}-r1": ["--space", p, "--subnets", "6", "--seed", "3"] for p in ("digits-cnn", "tiny-transformer")},
}

_PINNED_CHILD = """
import sys, json
from naspipe.cli import main
out, kind, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for name, args in runs.items():
    assert main(["reference", *args, "--out", f"{out}/{name}", "--no-progress", "--kernels", kind,
                 "--sampler", "uniform"]) == 0, name  # (uniform: the sampler the digests were recorded with)
"""


@pytest.fixture(scope="session")
def pinned_runs(tmp_path_factory) -> Callable[[str], Path]:  # noqa: ANN001
    """``pinned_runs(kind)``: the folder holding every ``PINNED_RUNS`` reference trained under kernels ``kind``.

    One fresh interpreter per kind, started with the kind's recipe in its environment (as a naspipe process that
    applied it), trains them all, once a session for every worker: not a fresh process per run, which is what a
    process that computed natively takes for each (``naspipe.lifecycle.kernels.in_fresh_process``; that route is
    tests/lifecycle/test_kernels.py's)."""
    import json
    import subprocess
    import sys

    from naspipe.lifecycle import kernels

    def get(kind: str) -> Path:
        def make(d: Path) -> None:
            env = {k: v for k, v in os.environ.items() if k not in kernels.MANAGED and k != "PYTEST_CURRENT_TEST"}
            env.update(kernels.RECIPES[kind])
            p = subprocess.run([sys.executable, "-c", _PINNED_CHILD, str(d), kind, json.dumps(PINNED_RUNS)],
                               env=env, capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, p.stderr[-3000:]

        return _shared(tmp_path_factory, f"pinned_runs_{kind}", make)

    return get
