"""A replica that went away is named by the replica that meets the loss (issue 25: a host lost mid-run).

The pipeline's sends and receives name their neighbour (tests/runtime/test_lost_neighbour.py); a stage's
replicas talk too: the leader announces each write to its followers and the replicas exchange gradients.
Those errors named no rank, so a host lost on the replica side was reported as a bare transport error. Here a
real gloo pair (one stage, two replicas) loses one replica; the other names its global rank whichever way it
meets the loss: the leader's announcement (``SendFailure``), the follower's write-order receiver
(``ChannelFailure`` -> ``PeerLost``) or the gradient exchange (``ExchangeFailure``). A replica that is only
slow (the exchange outlasts its timeout) is named by nobody: slow or hung is not lost.
"""

from __future__ import annotations

import os
import queue
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from naspipe.runtime.stagerun import StageRun
from naspipe.runtime.transport.comm import ChannelFailure
from naspipe.runtime.transport.replica_group import ReplicaGroup
from tests.helpers.gloo_pair import run_pair

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def _replica(rank: int, port: int, leaves: int, how: str, out: mp.Queue) -> None:  # (fork server child: module level)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    run = StageRun(stage=0, stages=1, policy="csp", replica=rank, replicas=2)
    group = ReplicaGroup(run, 2.0 if how == "exchange-slow" else 30.0)
    inbox: queue.Queue = queue.Queue()
    group.start(100, inbox)
    group(0, [torch.ones(3)])  # one exchange that works: both replicas are up
    if rank == leaves:  # this replica's host goes away at once (or, slow, is still there but does not answer)
        time.sleep(6 if how == "exchange-slow" else 0)
        os._exit(0)
    try:
        deadline = time.monotonic() + 30
        j = 1
        while time.monotonic() < deadline:
            if how == "announce":
                group.announce(j)
            elif how in ("exchange", "exchange-slow"):
                group(j, [torch.ones(3)])
            else:  # "receive": the follower's receiver thread reports the loss into the inbox
                item = inbox.get(timeout=30)
                if isinstance(item, ChannelFailure):
                    out.put(("ChannelFailure", item.peer, item.text))
                    break
            j += 1
            time.sleep(0.02)
        else:
            out.put(("no failure within 30 s", None, ""))
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put((type(e).__name__, getattr(e, "peer", None), str(e)))
    out.close()
    out.join_thread()
    os._exit(0)  # (the other replica is gone: no orderly teardown)


@pytest.mark.parametrize(("how", "leaves", "kind", "peer", "said"), [
    ("announce", 1, "SendFailure", 1, "to replica rank 1"),
    ("receive", 0, "ChannelFailure", 0, "from rank 0"),
    ("exchange", 1, "ExchangeFailure", 1, "with replica rank(s) 1 failed"),
    ("exchange-slow", 1, "TransportError", None, "with replica rank(s) 1 did not complete within 2 s"),
], ids=["leader-announces", "follower-receives", "gradient-exchange", "slow-exchange-names-nobody"])
def test_a_replica_that_went_away_is_named(how, leaves, kind, peer, said):
    [(got_kind, got_peer, text)], _ = run_pair(_replica, leaves, how)
    assert (got_kind, got_peer) == (kind, peer), text
    assert said in text, text
