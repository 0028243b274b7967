"""Every blocking wait of a stage has a limit tied to ``--timeout``: a stalled run ends with one line naming the wait.

Why it exists: a stage late to the start of the run (a slow resume, a loaded host) must end the stages waiting for
it within the barrier's limit (``--timeout``, ``BARRIER_FLOOR_S`` at least), with a ``StageTimeout`` naming the
place and the rank, not after the process group's own timeout (twice ``--timeout``, 60 s at least) with a line
naming a store key."""

from __future__ import annotations

import os
import time

import pytest
import torch

from naspipe.runtime import TrainConfig
from naspipe.runtime.processes.worker import BARRIER_FLOOR_S
from tests.helpers.gloo_pair import run_pair

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

LATE_S = 20.0  # how long rank 1 is late to the start: past the barrier's limit (the process group's own is 60 s)


def _late_start(rank: int, port: int, out_dir: str, out) -> None:  # (a process of the fork server: module level)
    from naspipe.runtime.processes import worker
    from naspipe.runtime.stage_exec import StageExecutor

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    cfg = TrainConfig.create("digits-cnn", out_dir, stages=2, subnets=4, timeout=2.0, progress=False)
    if rank == 1:  # stalls before the start barrier (a slow resume, a loaded host)
        warm = StageExecutor.warm_up
        StageExecutor.warm_up = lambda self: (time.sleep(LATE_S), warm(self))[1]  # type: ignore[method-assign]
    t0 = time.monotonic()
    try:
        worker.run_stage(rank, 2, cfg)
        got = ("done", "", time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - reported to the test
        got = (type(e).__name__, str(e), time.monotonic() - t0)
    if rank == 0:
        out.put(got)
        out.close()
        out.join_thread()
    os._exit(0)  # (the other rank may be gone: no orderly teardown)


def test_a_stage_late_to_the_start_ends_its_neighbour_within_the_barrier_s_limit(tmp_path):
    [(kind, text, took)], _ = run_pair(_late_start, str(tmp_path / "run"))
    assert kind == "StageTimeout", (kind, text, took)
    assert took < LATE_S - 3, took  # not the 20 s until rank 1 came, nor the process group's 60 s
    assert text == f"stage 0 (rank 0) waited {BARRIER_FLOOR_S:g} s at the start of the run for rank(s) 1 (--timeout)"
