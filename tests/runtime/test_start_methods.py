"""Every start method the platform offers completes a run (issue 13, hole 2).

Under ``spawn`` a stage's sentinel fires a moment before its exit status can be read; the supervisor used
to read ``exitcode`` as None there and stop a clean run ("stage 0 ... exited with code 0"). Each method
runs a short two-stage run twice in a row: both must complete, identical to each other.
"""

from __future__ import annotations

import json

import pytest
import torch.multiprocessing as tmp

from naspipe.runfolder.results import verify
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.config import START_METHODS

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

OFFERED = [m for m in START_METHODS if m in tmp.get_all_start_methods()]


@pytest.mark.parametrize("method", OFFERED)
def test_every_start_method_completes_repeatedly(tmp_path, method):
    runs = []
    for i in range(2):
        cfg = TrainConfig.create("digits-cnn", tmp_path / f"run{i}", stages=2, subnets=8, start_method=method,
                                 progress=False, timeout=60.0)
        train(cfg)
        status = json.loads((cfg.out / "status.json").read_text())
        assert status == {"complete": True}
        runs.append(cfg.out)
    ok, msg = verify(*runs)
    assert ok, msg
