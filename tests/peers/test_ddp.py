"""The DDP peer (``naspipe.peers.ddp``) trains what the reference trains, on the same batches and shards."""

from __future__ import annotations

import pytest

from naspipe.oracle.sequential_trainer import train_reference
from naspipe.peers.ddp import run_ddp
from naspipe.runfolder.results import param_hashes
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import resolve_space

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def test_ddp_ranks_train_what_the_reference_trains(tmp_path):
    space = resolve_space("digits-cnn")
    stream = UniformStream(space, 4, 4)
    subs = [stream[j] for j in range(4)]

    def ref(replicas: int) -> dict:
        return param_hashes(train_reference(space, stream, 4, SharedLayers(), replicas=replicas)
                            .model.global_named_parameters())

    assert run_ddp(space, subs, ranks=1, seed=4, workdir=tmp_path, timeout=120)["params"] == ref(1)
    used = run_ddp(space, subs, ranks=2, mode="used", seed=4, workdir=tmp_path, timeout=120)
    assert used["bytes_reduced"] > 0
    assert used["params"] == ref(2)  # two ranks: one addition, then / 2, as the reference combines
    wrapped = run_ddp(space, subs, ranks=2, mode="wrapper", seed=4, workdir=tmp_path, timeout=120)
    assert abs(used["final_loss"] - wrapped["final_loss"]) < 1e-5
    with pytest.raises(ValueError, match="divide the batch size"):
        run_ddp(space, subs, ranks=3, workdir=tmp_path)
