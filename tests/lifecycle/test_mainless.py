"""A script that calls ``naspipe.train`` without ``if __name__ == "__main__":``, or is fed on standard input, trains.

Issue 43, item 11: both used to end in ``TrainError: stage 1 exited with code 1`` after pages of multiprocessing
tracebacks, because each stage ran the script again before it started (``naspipe.lifecycle.mainless``).
Now the stages start as a notebook's do: the script's top level runs once, in the script's own process, and its
supernet travels by value. Two short runs (2 stages, 4 subnets) of a few seconds each, and a truth of two entries
built by two workers.
"""

from __future__ import annotations

import functools
import json
import multiprocessing.spawn as mp_spawn
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import naspipe
from naspipe.lifecycle.mainless import MAIN_KEYS, main_not_run_again

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

SCRIPT = """
import torch
import torch.nn.functional as F
from torch import nn
import naspipe

class B(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.a(x))

def data(j, g):
    x = torch.randn(4, 4, generator=g)
    return x, (x.sum(1) > 0).long()

sn = naspipe.Supernet([naspipe.Choice("l0", {"x": B, "y": lambda: nn.Linear(4, 4)}),
                       naspipe.Fixed("head", lambda: nn.Linear(4, 2))], data=data, loss=F.cross_entropy,
                      batch_size=4)
print("top level", flush=True)
result = naspipe.train(sn, out=OUT, stages=2, subnets=4, progress=False)
print("trained", len(result.losses), flush=True)
"""


def _run(tmp_path: Path, name: str, stdin: bool) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / name
    script = tmp_path / f"{name}.py"
    script.write_text(f"OUT = {str(out)!r}\n" + SCRIPT)
    root = str(Path(naspipe.__file__).parents[1])  # this naspipe, whatever the environment says
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    argv = [sys.executable, "-"] if stdin else [sys.executable, str(script)]
    done = subprocess.run(argv, input=script.read_text() if stdin else None, capture_output=True, text=True,
                          timeout=180, env=env, cwd=tmp_path)
    return done, out


@pytest.mark.parametrize("stdin", [False, True], ids=["no-main-guard", "stdin"])
def test_a_script_without_a_main_guard_or_on_stdin_trains(tmp_path, stdin):
    done, out = _run(tmp_path, "run", stdin)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["top level", "trained 4"], done.stdout  # its top level ran once
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())


TRUTH_SCRIPT = """
import sys
from naspipe.cli import main
print("top level", flush=True)
sys.exit(main(["truth", "--space", SPACE, "--sample", "2", "--steps", "2", "--seeds", "1", "--workers", "2",
               "--no-progress", "--out", OUT]))
"""


def test_a_truth_built_by_a_script_without_a_main_guard_runs_its_top_level_once(tmp_path):
    """The truth's worker pool starts as the stages do (``naspipe.truth.workers.worker_pool``): each spawned worker
    used to run the script again, which started a build of its own (refused: the folder was held)."""
    space = Path(naspipe.__file__).parents[1] / "data" / "spaces" / "digits-truth.json"
    script = tmp_path / "build.py"
    script.write_text(f"OUT = {str(tmp_path / 'truth')!r}\nSPACE = {str(space)!r}\n" + TRUTH_SCRIPT)
    root = str(Path(naspipe.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "top level" and done.stdout.count("top level") == 1, done.stdout
    assert "Traceback" not in done.stderr and "in use by another" not in done.stderr, done.stderr[-3000:]


def test_only_the_calling_threads_starts_leave_main_alone():
    def prep() -> dict:
        return mp_spawn.get_preparation_data("x")

    original = mp_spawn.get_preparation_data
    seen: dict[str, dict] = {}
    with main_not_run_again():
        with main_not_run_again():  # (nested: still in force after the inner one ends)
            pass
        seen["here"] = prep()
        t = threading.Thread(target=lambda: seen.setdefault("other", prep()))
        t.start()
        t.join()
    assert mp_spawn.get_preparation_data is original
    assert not any(k in seen["here"] for k in MAIN_KEYS)
    assert seen["other"] == original("x")  # another thread's starts are as they were


def test_a_supernet_defined_under_runpy_run_path_travels_by_value(tmp_path, monkeypatch):
    """``runpy.run_path(script)`` runs the script as module ``<run_path>``, which no stage process can import: its
    supernet is pickled by value, as ``__main__``'s is (by reference, every stage failed: "No module named
    '<run_path>'"). Unpickled here after the module is gone, as in another process."""
    import types

    import cloudpickle

    from naspipe.supernet.load import space_of

    module = types.ModuleType("<run_path>")
    monkeypatch.setitem(sys.modules, "<run_path>", module)
    exec(compile(SCRIPT.split('print("top level"')[0], str(tmp_path / "script.py"), "exec"), module.__dict__)
    wrapped = naspipe.Supernet([naspipe.Choice("l0", {"x": functools.partial(module.B)}),  # no lambda of its own
                                naspipe.Fixed("head", functools.partial(module.nn.Linear, 4, 2))],
                               data=functools.partial(module.data), loss=module.F.cross_entropy, batch_size=4)
    payloads = [space_of(sn).model.shippable() for sn in (module.sn, wrapped)]
    monkeypatch.delitem(sys.modules, "<run_path>")
    sn, again = (cloudpickle.loads(p) for p in payloads)
    assert [type(f()).__name__ for f in sn.blocks[0].candidates.values()] == ["B", "Linear"]
    assert type(again.blocks[0].candidates["x"]()).__name__ == "B"
    assert "<run_path>" not in cloudpickle.list_registry_pickle_by_value()  # registered for the pickle alone
