"""A neighbour lost mid-run is named whichever side meets the loss first (issue 25, a host lost mid-run).

A stage meets a neighbour that went away either in a receive (its receiver thread's ``ChannelFailure``) or in
its own next send: gloo raises at ``isend`` once the neighbour's connection closed. The multi-host test passed
alone and failed under load without ``status.json``: killed later in a stage's task, the surviving neighbour
met the loss first in a send, whose bare ``RuntimeError`` named no peer, so no rank wrote the status (and
torchrun ended rank 0 with SIGTERM). Here both ways name the peer, and ``naspipe.torchrun.lost_host`` turns
either into the lost host.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from naspipe.runtime.processes.signals import Terminated
from naspipe.runtime.processes.worker import PeerLost
from naspipe.runtime.stagerun import StageRun
from naspipe.runtime.transport.arrival import Roster
from naspipe.runtime.transport.comm import Links, SendFailure, TransportError
from naspipe.torchrun import failed_ranks, lost_host, record_failure
from tests.helpers.gloo_pair import run_pair

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

ROSTER = Roster({0: {"address": "10.0.0.1"}, 1: {"address": "10.0.0.1"}, 2: {"address": "10.0.0.2"},
                 3: {"address": "10.0.0.2"}})


def _survivor(rank: int, port: int, out: mp.Queue) -> None:  # (a process of the fork server: module level)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    inbox: queue.Queue = queue.Queue()
    links = Links(StageRun.local(rank, 2, "csp"), 4, inbox, 30.0)
    if rank == 1:  # the neighbour: takes one message, then goes away at once (a lost host)
        links.start()
        inbox.get(timeout=30)
        os._exit(0)
    links.send_activation(0, torch.ones(3), False)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:  # the next sends: one fails once the closed connection is seen
            links.send_activation(1, torch.ones(3), False)
            time.sleep(0.05)
        out.put(("no failure within 30 s", None, None))
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put((type(e).__name__, getattr(e, "peer", None), str(e)))
    out.close()
    out.join_thread()  # (the queue's feeder thread delivers before the exit below)
    os._exit(0)  # (the process group's peer is gone: no orderly teardown)


def test_a_send_to_a_neighbour_that_went_away_names_it():
    [(kind, peer, text)], _ = run_pair(_survivor)
    assert (kind, peer) == ("SendFailure", 1), text
    assert "to stage 1 failed" in text


@pytest.mark.parametrize("error", [
    PeerLost("stage 1: receiving gradients from stage 2 failed", 2),
    SendFailure("stage 1: sending the activation of subnet 5 to stage 2 failed", 2),
], ids=["receive", "send"])
def test_a_neighbour_on_another_host_is_a_lost_host_whichever_side_met_it(error, tmp_path: Path):
    assert lost_host(1, error, ROSTER, tmp_path) == {"ranks": [2, 3], "host": "10.0.0.2", "neighbour": 2}
    assert lost_host(2, SendFailure("to stage 3", 3), ROSTER, tmp_path) is None  # same host: not a lost host


def test_a_later_error_in_the_cleanup_keeps_the_lost_neighbour(tmp_path: Path):
    try:
        try:
            raise SendFailure("stage 1: sending to stage 2 failed", 2)
        finally:
            raise RuntimeError("destroy_process_group: Connection closed by peer")  # noqa: B012
    except RuntimeError as e:
        assert lost_host(1, e, ROSTER, tmp_path)["ranks"] == [2, 3]


def test_a_neighbour_that_recorded_its_own_error_or_a_send_that_timed_out_is_no_lost_host(tmp_path: Path):
    (tmp_path / "error-stage2.txt").write_text("InjectedFault: injected\n")
    assert lost_host(1, SendFailure("to stage 2", 2), ROSTER, tmp_path) is None
    assert lost_host(1, TransportError("a send to rank 2 did not complete within 30 s"), ROSTER, tmp_path / "x") is None


@pytest.mark.parametrize("ending,starts", [
    (Terminated("terminated by SIGTERM"), "rank 0 was stopped by SIGTERM after rank(s) 2 failed"),
    (PeerLost("stage 0: receiving gradients from stage 1 failed", 1), "stage 0 (rank 0) failed after rank(s) 2 failed"),
], ids=["sigterm", "neighbour-first"])
def test_rank_0_names_the_rank_whose_failure_was_its_own_however_it_met_it(ending, starts, tmp_path: Path):
    """Rank 2 (host b) fails; rank 1 then loses it; rank 0 is stopped by torchrun or meets rank 1's end first
    (a race under load, seen in a fresh-clone run): either way ``status.json`` names rank 2, not rank 1."""
    (tmp_path / "error-stage1.txt").write_text("PeerLost: stage 1: receiving gradients from stage 2 failed\n")
    (tmp_path / "error-stage2.txt").write_text("InjectedFault: injected at subnet 5\n")
    record_failure(SimpleNamespace(out=tmp_path, checkpoint_every=0, fault=None), 0, ending, ROSTER)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["rank"] == 2 and status["error"].startswith(starts) and "lost" not in status, status


def test_rank_0_waits_briefly_for_the_failing_rank_s_report(tmp_path: Path):
    (tmp_path / "error-stage1.txt").write_text("PeerLost: stage 1: receiving gradients from stage 2 failed\n")
    late = threading.Timer(0.5, lambda: (tmp_path / "error-stage2.txt").write_text("InjectedFault: injected\n"))
    late.start()
    t0 = time.monotonic()
    assert failed_ranks(tmp_path, 0) == [2] and time.monotonic() - t0 < 2.5
    late.join()
    assert failed_ranks(tmp_path / "none", 0, wait_s=0.2) == []  # no shared folder: nothing named, no hang


def _lost_by_rank_1(out: Path) -> None:
    """Rank 1 (host a) loses its neighbour rank 2 (host b) and names the lost host."""
    record_failure(SimpleNamespace(out=out, checkpoint_every=0, fault=None), 1,
                   PeerLost("stage 1: receiving gradients from stage 2 failed", 2), ROSTER)


def _lost_status(out: Path) -> dict:
    return {"complete": False, "rank": 2, "lost": {"ranks": [2, 3], "host": "10.0.0.2", "neighbour": 2},
            "error": "lost host 10.0.0.2 (rank(s) 2, 3): rank 1 saw: stage 1: receiving gradients from stage 2 failed"}


def test_rank_0_leaves_a_lost_host_named_by_another_rank_while_it_waited(tmp_path: Path):
    """Host b is lost: rank 1 names it while rank 0, stopped by SIGTERM, waits for a report of an own failure
    (none comes: a killed host writes nothing); rank 0 stops waiting and keeps rank 1's status.json."""
    (tmp_path / "error-stage1.txt").write_text("PeerLost: stage 1: receiving gradients from stage 2 failed\n")
    named = threading.Timer(0.5, _lost_by_rank_1, (tmp_path,))
    named.start()
    t0 = time.monotonic()
    record_failure(SimpleNamespace(out=tmp_path, checkpoint_every=0, fault=None), 0, Terminated("SIGTERM"), ROSTER)
    named.join()
    assert time.monotonic() - t0 < 2.5
    assert json.loads((tmp_path / "status.json").read_text()) == _lost_status(tmp_path)


def test_a_lost_host_named_just_before_rank_0_s_status_lands_still_stands(tmp_path: Path, monkeypatch):
    """The window between rank 0's look for a lost host and its own write: rank 1 names the lost host there (its
    status.json lands first); rank 0's status then must not be the last word."""
    from naspipe.runtime import outputs

    write = outputs.write_status
    calls = []

    def rank_1_first(out, *args, **kwargs):
        if not calls:  # rank 0's first write: rank 1 gets in between its check and its write
            calls.append(1)
            _lost_by_rank_1(out)
        write(out, *args, **kwargs)

    monkeypatch.setattr(outputs, "write_status", rank_1_first)
    (tmp_path / "error-stage3.txt").write_text("InjectedFault: injected\n")  # (rank 0 does not wait)
    record_failure(SimpleNamespace(out=tmp_path, checkpoint_every=0, fault=None), 0, Terminated("SIGTERM"), ROSTER)
    assert calls and json.loads((tmp_path / "status.json").read_text()) == _lost_status(tmp_path)


def test_a_lost_host_is_named_once(tmp_path: Path):
    """Two ranks meet the same lost host: the first one's record stands, and status.json says what it says."""
    _lost_by_rank_1(tmp_path)
    record_failure(SimpleNamespace(out=tmp_path, checkpoint_every=0, fault=None), 0,
                   SendFailure("stage 0: sending to stage 3 failed", 3), ROSTER)
    assert json.loads((tmp_path / "status.json").read_text()) == _lost_status(tmp_path)
    assert json.loads((tmp_path / "lost-host.json").read_text())["error"].endswith("rank 1 saw: stage 1: receiving "
                                                                                   "gradients from stage 2 failed")


def test_each_rank_records_its_failure_and_rank_0_reads_the_records(tmp_path: Path):
    """Rank 2 fails on its own; rank 1, which lost it, ends in a later error of its cleanup (a RuntimeError whose
    class name says nothing of the lost neighbour): its record says it was a consequence, so rank 0 names rank 2
    alone (the first word of rank 1's error text named it too)."""
    cfg = SimpleNamespace(out=tmp_path, checkpoint_every=0, fault=None)
    record_failure(cfg, 2, RuntimeError("injected"), ROSTER)
    try:
        try:
            raise SendFailure("stage 1: sending to stage 2 failed", 2)
        finally:
            raise RuntimeError("destroy_process_group: Connection closed by peer")  # noqa: B012
    except RuntimeError as e:
        record_failure(cfg, 1, e, ROSTER)
    assert json.loads((tmp_path / "error-stage1.json").read_text()) == {"rank": 1, "kind": "RuntimeError",
                                                                      "own": False, "peer": 2}
    assert json.loads((tmp_path / "error-stage2.json").read_text()) == {"rank": 2, "kind": "RuntimeError",
                                                                      "own": True, "peer": None}
    assert (tmp_path / "error-stage1.txt").read_text().startswith("RuntimeError")  # (the text leads with its line)
    t0 = time.monotonic()
    record_failure(cfg, 0, Terminated("SIGTERM"), ROSTER)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["rank"] == 2 and status["error"].startswith("rank 0 was stopped by SIGTERM after rank(s) 2 failed")
    assert time.monotonic() - t0 < 2.5 and not (tmp_path / "lost-host.json").exists()
