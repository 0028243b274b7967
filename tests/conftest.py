"""Shared test fixtures: every multi-process test must leave no process behind.

The folders under ``tests/`` mirror the package; shared code lives in ``tests/helpers/``, which this file puts
first on ``sys.path`` so the user modules there are found by name, as a user's would be on PYTHONPATH
(``--space user_supernets:good``), in this process and in the stage processes it starts.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from naspipe.lifecycle import kernels
from naspipe.lifecycle.startup import collector_paused
from tests.helpers import machine_load
from tests.helpers.processes import leftovers
from tests.helpers.waiting import wait_until

pytest_plugins = ["tests.helpers.runs"]  # trained runs shared by several modules (session fixtures)

HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))

# The suite computes under naspipe's default CPU kernels, as every naspipe command does (naspipe.lifecycle.kernels):
# set before any test computes, so in-process references and the processes tests start share the bits; a test of
# another kind gets fresh processes, as a notebook's user would
kernels.enter(kernels.DEFAULT)


def pytest_configure(config):  # noqa: ANN001, ANN201
    """A suite started in the background (``make test &``) inherits SIGINT ignored, and so would every command it
    starts: the Ctrl-C tests would see a run that never notices Ctrl-C. The tests are of what a terminal's user
    gets: SIGINT handled here, so started processes begin with its default."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.stash[_STARTED] = machine_load.snapshot()


_STARTED = pytest.StashKey["machine_load.Snapshot | None"]()


def pytest_terminal_summary(terminalreporter, config):  # noqa: ANN001, ANN201
    """The suite's last lines name the machine beside its time: the CPU, and how busy its cores were meanwhile
    (``tests/helpers/machine_load.py``; a pytest-xdist worker reports nothing)."""
    if not hasattr(config, "workerinput"):
        terminalreporter.write_line(machine_load.summary(kernels.cpu_key(), config.stash.get(_STARTED, None),
                                                         machine_load.snapshot()))


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):  # noqa: ANN001, ANN201
    """Collection imports torch, hypothesis, nbformat and every test module: made with the garbage collector paused,
    then one collection and a freeze, as naspipe's own processes start (``naspipe.lifecycle.startup``), so no
    collection during
    the tests walks them again."""
    with collector_paused():
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def _temporary_folders_stay_in_the_session(tmp_path_factory):  # noqa: ANN001, ANN202
    """The processes the tests start make temporary folders of their own (torchrun's ``torchelastic_*``, a fork
    server's ``pymp-*``), and a process that is killed (a kernel the runner ends at once) leaves its folder: with
    ``TMPDIR`` here they stay under pytest's base folder, which pytest rotates, not in /tmp. This process's own
    ``tempfile`` keeps its folder (fixed below, before the change): the Unix sockets made there (kernels', the
    warm naspipe's) need short paths."""
    tempfile.gettempdir()  # (chosen once per process, then kept)
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp", numbered=False))
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before


@pytest.fixture
def no_process_left_behind():
    """After the test: no stage, launcher or multiprocessing child of this session is still alive."""
    yield
    wait_until(lambda: not (leftovers() or multiprocessing.active_children()), 5, every_s=0.1)
    assert not multiprocessing.active_children()
    assert not leftovers(), [p.cmdline() for p in leftovers()]


# `make test` runs the suite on pytest-xdist workers with `--dist loadfile`, refined here (the scheduler below):
# a worker runs a unit of work at a time and takes the next when it is done. A unit is a whole test module (its
# trained runs, module-scoped fixtures, are made once) unless the module is named in SPLIT: the docs pages' code
# blocks are independent tests (each its own unit, so pages run side by side). The browser module is one unit:
# one JupyterLab, one chromium (as two units each started its own, about 15 s of CPU more, while the suite is
# bound by CPU; one unit, started first, still ends long before the others). Modules that hold fixed resources
# keep one unit per set of them (the network namespaces of tests/runtime/test_multihost.py are named after the
# worker's pid).
# Units go out in this order: the slowest first (the prefixes in SLOW_FIRST, measured on whole runs), then the
# folders whose tests start stage processes or kernels, then the many short torch-free modules, so the workers end
# together instead of one long module running alone at the end (longest first). Order only: every test runs, in
# any order.
SLOW_FIRST = ("tests/browser/", "tests/docs/test_docs_code.py::test_every_code_block_of_the_page_runs[README.md]",
              "tests/runtime/test_multihost.py", "tests/supernet/test_runs.py", "tests/docs/",
              "tests/runtime/test_run_endings.py", "tests/benchmarks/", "tests/sched/test_properties.py",
              "tests/sim/test_replicas.py", "tests/truth/", "tests/peers/", "tests/notebooks/", "tests/runtime/",
              "tests/supernet/", "tests/cli/", "tests/lifecycle/", "tests/oracle/", "tests/search/", "tests/ranking/")
SPLIT = {"tests/docs/test_docs_code.py": 0}  # module -> units (0: one per test)


def _slow_first(item) -> int:  # noqa: ANN001
    return next((i for i, prefix in enumerate(SLOW_FIRST) if item.nodeid.startswith(prefix)), len(SLOW_FIRST))


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: every worker sorts alike (a stable sort)
        items.sort(key=_slow_first)


def units(nodeids: list[str]) -> dict[str, str]:
    """Each test's unit of work: its module, a share of the module (``module#k``), or the test itself."""
    out, seen = {}, {}
    for nodeid in nodeids:
        module = nodeid.split("::", 1)[0]
        parts = SPLIT.get(module)
        index = seen[module] = seen.get(module, -1) + 1
        out[nodeid] = module if parts is None else nodeid if parts == 0 else f"{module}#{index % parts}"
    return out


def pytest_xdist_make_scheduler(config, log):  # noqa: ANN001, ANN201
    """``--dist loadfile`` with the units above (None: pytest-xdist's own scheduler for any other ``--dist``)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if not hasattr(self, "unit_of"):  # every worker collected the same tests (checked by pytest-xdist)
                self.unit_of = units(next(iter(self.registered_collections.values())))
            return self.unit_of[nodeid]

    return UnitScheduling(config, log)
