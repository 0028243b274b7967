"""naspipe.lifecycle.startup: a process's start-up imports run without cyclic collections (one at the end) and are
frozen afterwards; a command and a torchrun rank import torch that way, and a torch-free command still imports no torch
(a stage's fork server and start: tests/runtime/test_runtime.py; a truth worker: tests/truth)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

from naspipe.lifecycle.startup import collector_paused

ROOT = Path(__file__).resolve().parents[2]

# at exit: torch imported? torch._dynamo? collections while torch's own import ran? objects frozen?
_REPORT = ("import atexit, gc, sys\nduring = []\n"
           "def seen(phase, info):\n"
           "    spec = getattr(sys.modules.get('torch'), '__spec__', None)\n"
           "    if phase == 'start' and getattr(spec, '_initializing', False):\n"
           "        during.append(info['generation'])\n"
           "gc.callbacks.append(seen)\n"
           "atexit.register(lambda: print('torch' in sys.modules, 'torch._dynamo' in sys.modules, len(during), "
           "gc.get_freeze_count() > 100_000, file=sys.stderr))\n")


def _run(code: str, *args: str, cwd: Path = ROOT, env: dict | None = None) -> tuple[int, str, list[str]]:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                       env=env)
    return p.returncode, p.stdout, p.stderr.strip().splitlines()


def test_the_block_runs_without_collections_then_collects_once_and_no_later_collection_walks_what_lives():
    runs: list[int] = []
    collected: list[str] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            runs.append(info["generation"])

    class Cycle:
        pass

    gc.callbacks.append(seen)
    try:
        assert gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
            kept = [[i] for i in range(20_000)]  # (the default threshold collects every 700 new containers)
            garbage = Cycle()
            garbage.me = garbage
            weakref.finalize(garbage, collected.append, "collected")
            del garbage
            assert runs == [] and collected == []
        assert gc.isenabled() and runs == [2]  # one full collection, after the block
        assert collected == ["collected"]  # a cycle the block left is freed, not frozen
        # what the block made and kept is in none of the generations a collection walks (gc.get_objects lists them)
        later = [[i] for i in range(3)]
        walked = {id(o) for o in gc.get_objects()}
        assert not any(id(k) in walked for k in kept)
        assert all(id(x) in walked for x in later)  # what the process makes afterwards is walked as usual
    finally:
        gc.callbacks.remove(seen)


def test_a_collector_paused_before_stays_paused():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_start_up_imports_are_made_without_collections_but_the_last_in_a_fresh_process():
    code = ("import gc, sys\nfrom naspipe.lifecycle.startup import import_at_start\n"
            "runs = []\ngc.callbacks.append(lambda phase, info: runs.append(phase))\nimport_at_start('numpy', 'json')\n"
            "print(len(runs), gc.isenabled(), gc.get_freeze_count() > 10_000, 'numpy' in sys.modules, file=sys.stderr)")
    assert _run(code)[2][-1] == "2 True True True"  # (a collection's start and stop)


_COMMAND = _REPORT + "sys.argv = ['naspipe', *sys.argv[1:]]\nfrom naspipe.cli import entry\nentry()"


def test_a_command_imports_torch_where_it_needs_it_paused(tmp_path):
    rc, _, err = _run(_COMMAND, "reference", "--space", "digits-cnn", "--subnets", "1", "--no-progress", "--out",
                      str(tmp_path / "ref"))
    assert rc == 0 and err[-1] == "True True 1 True", err[-5:]  # one collection in torch's import: at its end
    rc, out, err = _run(_COMMAND, "simulate", "--space", "unit-k12", "--subnets", "20", "--json")
    assert rc == 0 and json.loads(out)["subnets"] == 20 and err[-1] == "False False 0 False", err[-5:]
    # an error found before torch is needed comes before it is imported
    rc, _, err = _run(_COMMAND, "train", "--stages", "0")
    assert rc == 2 and err == ["naspipe: error: --out is required (or --resume DIR to continue the run in DIR)",
                               "False False 0 False"], err


def test_a_lookup_does_not_use_the_hook_up_and_a_module_it_cannot_find_is_missing_as_usual():
    code = _REPORT + ("import importlib.util\nfrom naspipe.lifecycle.startup import pause_at_first_import\n"
                      "pause_at_first_import('torch')\npause_at_first_import('no_such_module_here')\n"
                      "assert importlib.util.find_spec('torch') is not None\n"
                      "try:\n    import no_such_module_here\nexcept ModuleNotFoundError:\n    pass\n"
                      "else:\n    raise AssertionError\nimport torch")
    rc, _, err = _run(code)
    assert rc == 0 and err[-1] == "True False 1 True", err[-5:]


def test_without_the_hook_torchs_import_collects_hundreds_of_times():
    """What the tests here rule out happens when torch is imported plainly (so they can fail)."""
    rc, _, err = _run(_REPORT + "import torch")
    torch_, dynamo, during, frozen = err[-1].split()
    assert rc == 0 and (torch_, dynamo, frozen) == ("True", "False", "False") and int(during) >= 100, err[-1]


def test_a_torchrun_rank_imports_torch_paused(tmp_path):
    """A rank (``python -m naspipe.torchrun``) imports torch paused, for its model's check, after its own network
    check; here rank 0 of 2 then waits half a second for a rank that never comes, and ends with its one line
    (no stage started: no torch._dynamo)."""
    from naspipe.runtime.transport.ports import free_port

    code = _REPORT + ("import runpy\nsys.argv = ['naspipe.torchrun', *sys.argv[1:]]\n"
                      "runpy.run_module('naspipe.torchrun', run_name='__main__', alter_sys=True)")
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "PYTHONPATH": str(ROOT)}
    rc, _, lines = _run(code, "--space", "digits-cnn", "--out", "run", "--connect-timeout", "0.5", cwd=tmp_path,
                        env=env)
    assert rc == 2 and "rank(s) 1 of 2 did not arrive" in lines[-2], lines[-5:]
    assert lines[-1] == "True False 1 True"
