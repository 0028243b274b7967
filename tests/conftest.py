"""Shared test fixtures: every multi-process test must leave no process behind.

The folders under ``tests/`` mirror the package; shared code lives in ``tests/helpers/``, which this file puts
first on ``sys.path`` so the user modules there are found by name, as a user's would be on PYTHONPATH
(``--space user_supernets:good``), in this process and in the stage processes it starts.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.processes import leftovers

pytest_plugins = ["tests.helpers.runs"]  # trained runs shared by several modules (session fixtures)

HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))


@pytest.fixture
def no_process_left_behind():
    """After the test: no stage, launcher or multiprocessing child of this session is still alive."""
    yield
    deadline = time.monotonic() + 5
    while (leftovers() or multiprocessing.active_children()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not multiprocessing.active_children()
    assert not leftovers(), [p.cmdline() for p in leftovers()]


# `make test` runs the suite on two pytest-xdist workers, one test module at a time per worker (`--dist loadfile`:
# a module's trained runs are made once, and the two modules that hold fixed resources, network namespaces and
# JupyterLab, are one file each). A worker takes the next module when it is done, in this order: the longest
# modules first (the files named here were the slowest of a whole serial run), then the folders whose tests
# start stage processes or kernels, so the many short torch-free modules fill in at the end instead of one long
# module running alone at the end (longest first). Order only: every test runs, in any order.
SLOW_FIRST = ("tests/browser/", "tests/runtime/test_multihost.py", "tests/supernet/test_runs.py",
              "tests/benchmarks/", "tests/sched/test_properties.py", "tests/sim/test_replicas.py", "tests/truth/",
              "tests/peers/", "tests/notebooks/", "tests/runtime/", "tests/supernet/", "tests/cli/",
              "tests/test_reference.py", "tests/search/", "tests/ranking/")


def _slow_first(item) -> int:  # noqa: ANN001
    return next((i for i, prefix in enumerate(SLOW_FIRST) if item.nodeid.startswith(prefix)), len(SLOW_FIRST))


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: every worker sorts alike (a stable sort)
        items.sort(key=_slow_first)
