"""Fail fast, never hang: a stage killed from outside, or a launcher that disappears, ends everything.

* a random stage is SIGKILLed mid-run (``os.kill`` on its pid, no cooperation from the worker): the run
  ends within 30 s with an error naming that rank and pid, ``status.json`` says incomplete, what was
  written so far is kept, no process survives;
* the same while checkpoints are being taken: the newest complete checkpoint is named and resumable;
* the launcher itself is SIGKILLed: every stage notices its lifeline closing and exits (no orphans).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from naspipe.runtime import TrainConfig
from naspipe.runtime.checkpoint import newest_complete, root_of
from tests.helpers.processes import alive, descendants, train_in_thread
from tests.helpers.waiting import wait_until

BIN = Path(sys.executable).parent


pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def _lines(path: Path) -> int:
    try:
        return len(path.read_bytes().splitlines())
    except OSError:
        return 0


@pytest.mark.parametrize("checkpoints", [False, True])
def test_sigkill_of_a_random_stage_mid_run_ends_the_run_naming_it(tmp_path, checkpoints):
    stages = 3
    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=stages, subnets=400, jitter_ms=3.0,
                             progress=False, timeout=60, checkpoint_every=20 if checkpoints else None)
    me = psutil.Process()
    t, box = train_in_thread(cfg)
    want = 60 if checkpoints else 20  # trace lines: mid-run (and, with checkpoints, past the first one)
    wait_until(lambda: _lines(cfg.out / "events.jsonl") >= want
               and (not checkpoints or newest_complete(root_of(cfg.out)) is not None), 120,
               unless=lambda: "error" in box)
    procs = descendants(me)
    assert len(procs) == stages and "error" not in box, (procs, box)
    victim = random.Random().choice(procs)
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    t.join(60)
    assert not t.is_alive()
    assert box["end"] - killed < 30
    err = box["error"]
    rank = err.rank
    assert f"stage {rank} (rank {rank}, pid {victim.pid}) killed by signal SIGKILL" in str(err), str(err)
    status = json.loads((cfg.out / "status.json").read_text())
    assert status["complete"] is False and status["rank"] == rank
    assert _lines(cfg.out / "events.jsonl") >= want  # outputs so far are kept
    if checkpoints:
        assert status["checkpoint"] >= 20 and status["checkpoint"] % 20 == 0
        assert f"--resume {cfg.out}" in str(err)
    for p in procs:
        p.wait(5) if alive(p) else None
        assert not alive(p)


def test_a_killed_launcher_leaves_no_stage_behind(tmp_path):
    """SIGKILL ``naspipe train`` itself: the stages' lifeline pipes close and they exit on their own."""
    out = tmp_path / "run"
    proc = subprocess.Popen([str(BIN / "naspipe"), "train", "--space", "digits-cnn", "--stages", "2", "--subnets",
                             "400", "--jitter-ms", "3", "--no-progress", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        launcher = psutil.Process(proc.pid)
        wait_until(lambda: _lines(out / "events.jsonl") >= 10, 150, every_s=0.1, unless=lambda: proc.poll() is not None)
        assert proc.poll() is None, "the run ended before it could be killed"
        family = [p for p in launcher.children(recursive=True) if alive(p)]
        assert len(family) >= 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        gone, living = psutil.wait_procs(family, timeout=20)
        # the stages and (with forkserver) the fork server end; the resource tracker ends with its pipe
        assert not [p for p in living if "resource_tracker" not in " ".join(p.cmdline())], living
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# issue 13, hole 7: a stopped stage is blamed correctly
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="stopped processes are seen through /proc")
@pytest.mark.parametrize("victim", [0, 2])
def test_a_stopped_stage_is_named_not_the_peers_that_timed_out(tmp_path, victim):
    from naspipe.runtime import TrainConfig

    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=3, subnets=400, jitter_ms=3.0, progress=False,
                             timeout=5.0)
    t, box = train_in_thread(cfg)
    assert wait_until(lambda: _lines(cfg.out / "events.jsonl") >= 20, 120, unless=lambda: not t.is_alive()), box
    procs = descendants(psutil.Process())
    assert len(procs) == 3
    pid = procs[victim].pid
    rank = _rank_of(procs, pid)
    os.kill(pid, signal.SIGSTOP)
    try:
        t.join(60)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert not t.is_alive()
    msg = str(box["error"])
    assert msg.startswith(f"stage {rank} (rank {rank}, pid {pid}) was stopped (e.g. SIGSTOP) and did not answer"), msg


def _rank_of(procs: list, pid: int) -> int:
    """Stages are started in rank order: the oldest is rank 0."""
    return [p.pid for p in procs].index(pid)
