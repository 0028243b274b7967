"""naspipe.startup: a process's start-up imports run without cyclic collections and are frozen afterwards; the
processes naspipe starts for itself (a command, a stage's fork server, a torchrun rank) start that way, and a
torch-free command still imports no torch."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from naspipe.startup import collector_paused

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, *args: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return p.stderr.strip().splitlines()


def test_the_block_runs_without_collections_and_what_it_made_is_frozen():
    runs: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        assert gc.isenabled()
        before = gc.get_freeze_count()
        with collector_paused():
            assert not gc.isenabled()
            made = [[i] for i in range(20_000)]  # (the default threshold collects every 700 new containers)
        assert gc.isenabled() and runs == []
        assert gc.get_freeze_count() >= before + len(made)
    finally:
        gc.callbacks.remove(seen)
        gc.unfreeze()  # (this test process's objects go back to the collector)


def test_a_collector_paused_before_stays_paused():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_start_up_imports_are_made_without_collections_in_a_fresh_process():
    code = ("import gc, sys\nfrom naspipe.startup import import_at_start\n"
            "runs = []\ngc.callbacks.append(lambda phase, info: runs.append(phase))\nimport_at_start('numpy', 'json')\n"
            "print(len(runs), gc.isenabled(), gc.get_freeze_count() > 10_000, 'numpy' in sys.modules, file=sys.stderr)")
    assert _run(code)[-1] == "0 True True True"


# at exit: torch imported? torch._dynamo? full collections once torch's import began? objects frozen?
_REPORT = ("import atexit, gc, sys\nfull = []\n"
           "gc.callbacks.append(lambda phase, info: full.append(1) if phase == 'start' and info['generation'] == 2 "
           "and 'torch' in sys.modules else None)\n"
           "atexit.register(lambda: print('torch' in sys.modules, 'torch._dynamo' in sys.modules, len(full), "
           "gc.get_freeze_count() > 100_000, file=sys.stderr))\n")
_COMMAND = _REPORT + "sys.argv = ['naspipe', *sys.argv[1:]]\nfrom naspipe.cli import entry\nentry()"


def test_a_command_imports_torch_when_it_needs_it_and_then_paused(tmp_path):
    # verify (torch for the checkpoints) fails on missing folders after importing torch, paused and frozen
    assert _run(_COMMAND, "verify", str(tmp_path / "a"), str(tmp_path / "b"))[-1] == "True False 0 True"
    assert _run(_COMMAND, "simulate", "--space", "unit-k12", "--subnets", "20", "--json")[-1] == "False False 0 False"
    # an error found before torch is needed comes before it is imported
    assert _run(_COMMAND, "train", "--stages", "0")[-1] == "False False 0 False"


def test_without_the_pause_torchs_import_walks_its_objects_again_and_again():
    """What the tests above rule out happens when torch is imported plainly (so they can fail)."""
    torch_, dynamo, full, frozen = _run(_REPORT + "import torch")[-1].split()
    assert (torch_, dynamo, frozen) == ("True", "False", "False") and int(full) >= 1, full


def _inherited(out) -> None:  # noqa: ANN001 - (a process of the fork server: module level)
    out.put(gc.get_freeze_count())


def test_a_stage_fork_server_imports_frozen():
    """Every stage inherits torch, torch._dynamo and the worker frozen from the server (before it freezes anything
    itself)."""
    from naspipe.runtime.processes.launcher import process_context

    ctx = process_context("forkserver")
    out = ctx.Queue()
    p = ctx.Process(target=_inherited, args=(out,), daemon=True)
    p.start()
    try:
        frozen = out.get(timeout=120)
    finally:
        p.join(30)
    assert frozen > 100_000, frozen


def test_a_torchrun_rank_imports_torch_and_dynamo_paused(tmp_path):
    """A rank's configuration and torch imports run paused; here rank 0 of 2 then waits half a second for a rank
    that never comes, and ends with its one line."""
    from naspipe.runtime.transport.ports import free_port

    code = _REPORT + ("from naspipe.torchrun import main\n"
                      "sys.exit(main(['--space', 'digits-cnn', '--out', 'run', '--connect-timeout', '0.5']))")
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and "rank(s) 1 of 2 did not arrive" in lines[-2], p.stderr[-2000:]
    assert lines[-1] == "True True 0 True"
