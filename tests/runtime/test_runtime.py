"""The runtime: real multi-process training must match the sequential reference bit for bit.

Two levels:

* in one process, the stage executors replay schedules the simulator produced with the real scheduler
  objects (random costs give many interleavings), passing tensors by hand: CSP equals the reference, asp
  does not (fast, no processes);
* with real processes on torch.distributed (gloo): CSP with 1-4 stages, with and without jitter, for
  every shared-layer policy on both presets passes ``verify`` against the reference; asp on a
  conflict-dense space differs; a crashed, killed or hung stage ends the run quickly, naming the rank;
  no process is left behind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import psutil
import pytest
import torch

from naspipe.models import DEFAULT_LR
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes, verify, write_losses, write_params
from naspipe.runtime import ConfigError, TrainConfig, train
from naspipe.runtime.processes.jitter import jitter_seconds
from naspipe.runtime.processes.launcher import TrainError
from naspipe.runtime.replay import replay_schedule
from naspipe.runtime.transport.comm import ACTIVATION, GRADIENT, HEADER_LEN, decode_header, encode_header
from naspipe.runtime.update_rules.versions import FixedVersions
from naspipe.sched.policies import POLICIES
from naspipe.sched.trace import Trace, check_causal
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import Block, preset

N = 24  # subnets per multi-process run


# ---- helpers --------------------------------------------------------------------------------------------
pytestmark = pytest.mark.usefixtures("no_process_left_behind")


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """Reference run directories, computed once per (space, shared, n, optimizer, seed)."""
    root = tmp_path_factory.mktemp("refs")

    def get(space: str, shared: str, n: int = N, optimizer: str = "sgd", seed: int = 0) -> Path:
        sp = preset(space)
        d = root / f"{space}-{shared.replace(':', '')}-{n}-{optimizer}-{seed}"
        if d.exists():
            return d
        res = train_reference(sp, UniformStream(sp, seed, n), seed, parse_shared(shared), optimizer=optimizer)
        d.mkdir()
        write_losses(d / "losses.csv", res.losses)
        write_params(d / "params.json", param_hashes(res.model.global_named_parameters()))
        return d

    return get


def conflict_dense(k: int = 1):
    """tiny-transformer with only ``k`` candidates per choice block: every subnet shares with its neighbours."""
    sp = preset("tiny-transformer")
    blocks = tuple(b if b.fixed else Block(b.name, b.candidates[:k], b.fixed, b.role) for b in sp.blocks)
    return dataclasses.replace(sp, name=f"tiny-transformer-k{k}", blocks=blocks)


# ---- pure pieces ------------------------------------------------------------------------------------------
def test_header_round_trip():
    t = torch.zeros(2, 3, 4, 5)
    h = encode_header(ACTIVATION, 17, t, True)
    assert len(h) == HEADER_LEN
    assert decode_header(h) == (ACTIVATION, 17, 1, torch.float32, (2, 3, 4, 5))
    kind, j, flags, dtype, shape = decode_header(encode_header(GRADIENT, 3, None))
    assert (kind, j, dtype, shape) == (GRADIENT, 3, None, ())
    with pytest.raises(Exception, match="malformed"):
        decode_header([9] + [0] * (HEADER_LEN - 1))


def test_jitter_is_seeded_and_bounded():
    a = [jitter_seconds(0, "F", j, 1, 5.0) for j in range(200)]
    assert a == [jitter_seconds(0, "F", j, 1, 5.0) for j in range(200)]
    assert all(0 <= x <= 0.005 for x in a) and len(set(a)) == 200
    assert a != [jitter_seconds(1, "F", j, 1, 5.0) for j in range(200)]
    assert jitter_seconds(0, "B", 3, 0, 0.0) == 0.0


def test_fixed_versions_apply_in_order_and_drop_old_versions():
    w = torch.nn.Parameter(torch.zeros(1))
    applied = []

    def apply(grads):
        applied.append(float(grads["w"]))
        with torch.no_grad():
            w.add_(1.0)

    v = FixedVersions({"w": w}, delay=2, n=6, apply=apply)
    assert [float(v.leaves(j)["w"].detach()) for j in (0, 2, 1)] == [0.0, 0.0, 0.0]  # subnets 0..2 read v_0
    v.submit(1, {"w": torch.tensor([1.0])})
    assert applied == []  # waits for subnet 0
    v.submit(0, {"w": torch.tensor([0.0])})
    assert applied == [0.0, 1.0] and v.held == 2  # v_1 (for subnet 3) and v_2 (for subnet 4)
    assert float(v.leaves(3)["w"].detach()) == 1.0 and v.held == 1
    with pytest.raises(RuntimeError, match="not available"):
        v.leaves(5)  # v_3 needs subnet 2's update first
    with pytest.raises(RuntimeError, match="twice"):
        v.submit(1, {"w": None})


def _freeze_then_collect(out) -> None:  # noqa: ANN001 - (a process of the fork server: module level)
    import gc
    import weakref

    from naspipe.runtime.processes.worker import fresh_process

    fresh_process()  # what a stage process does first
    frozen = gc.get_freeze_count()

    class Cycle:
        pass

    c = Cycle()
    c.me = c
    seen: list[str] = []
    weakref.finalize(c, seen.append, "collected")
    del c
    gc.collect()
    out.put((frozen, seen))


def test_a_stage_process_freezes_what_it_inherited_and_still_collects_its_own_cycles():
    """The end-of-stage gc.collect walked every torch object the fork server had imported (half a short stage's
    CPU); they are frozen at the start, and a reference cycle the run makes is still collected."""
    from naspipe.runtime.processes.launcher import process_context

    ctx = process_context("forkserver")
    out = ctx.Queue()
    p = ctx.Process(target=_freeze_then_collect, args=(out,), daemon=True)
    p.start()
    try:
        frozen, seen = out.get(timeout=120)
    finally:
        p.join(30)
    assert frozen > 10_000, frozen  # torch, torch._dynamo, naspipe: not walked by the stage's collections
    assert seen == ["collected"]


def test_a_stage_without_a_fork_server_imports_dynamo_at_its_start_paused():
    """A torchrun rank (or a spawned stage) has torch but not torch._dynamo when its stage starts: it comes in
    ``fresh_process`` as a start-up import (one collection, at its end), not at the first optimizer."""
    import subprocess
    import sys

    code = ("import gc, sys\nimport torch\nfrom naspipe.runtime.processes.worker import fresh_process\n"
            "runs = []\ngc.callbacks.append(lambda phase, info: runs.append(phase))\nfresh_process()\n"
            "print('torch._dynamo' in sys.modules, len(runs), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.stderr.strip().splitlines()[-1] == "True 2", p.stderr[-2000:]  # (a collection's start and stop)


_SERVER_PROBE = """
import gc
from naspipe.runtime.processes.launcher import process_context
if __name__ == "__main__":
    with process_context("forkserver").Pool(1) as pool:  # (a new fork server: this process's first)
        print(pool.apply(gc.get_freeze_count), sum(s["collections"] for s in pool.apply(gc.get_stats)))
"""


def test_the_stage_fork_server_imports_paused_and_frozen(tmp_path):
    """Every stage inherits torch, torch._dynamo and the worker frozen from the server (``server_preload``), and
    the server's collection counts: about 50 in all, against about 700 with a plain preload."""
    import subprocess
    import sys

    (tmp_path / "probe.py").write_text(_SERVER_PROBE)
    p = subprocess.run([sys.executable, str(tmp_path / "probe.py")], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    frozen, collections = map(int, p.stdout.split())
    assert frozen > 100_000 and collections < 200, (frozen, collections, p.stderr[-2000:])


def _replay(space, stages: int, policy: str, shared: str, subnets, *, seed: int = 0, optimizer: str = "sgd",
            jitter: float = 0.5):
    """Run the real executors in the order of a simulated schedule (one process, tensors by hand)."""
    losses, execs = replay_schedule(space, stages, policy, subnets, seed=seed, shared=shared, optimizer=optimizer,
                                    jitter=jitter)
    hashes: dict = {}
    for ex in execs:
        hashes.update(param_hashes(ex.model.global_named_parameters()))
    return losses, hashes


@pytest.mark.parametrize("space,stages,policy,shared", [
    ("tiny-transformer", 3, "csp", "frozen"),
    ("tiny-transformer", 4, "csp", "delayed:2"),
    ("digits-cnn", 3, "csp", "serial"),
    ("digits-cnn", 2, "csp-bw", "delayed:1"),
    ("tiny-transformer-k1", 3, "asp", "frozen"),  # 1F1B without the causal rule: must differ
])
def test_executors_replaying_simulated_schedules_match_the_reference(space, stages, policy, shared):
    sp = conflict_dense(1) if space == "tiny-transformer-k1" else preset(space)
    subnets = [UniformStream(sp, 3, 16)[j] for j in range(16)]
    ref = train_reference(sp, ReplayStream(sp, subnets), 3, parse_shared(shared))
    losses, hashes = _replay(sp, stages, policy, shared, subnets, seed=3)
    same = losses == ref.losses and hashes == param_hashes(ref.model.global_named_parameters())
    assert same == (policy != "asp")


def test_bsp_with_one_micro_batch_and_asp_with_one_stage_are_sequential():
    """TECHNIQUES section 7: GPipe with M = 1 and any policy with P = 1 equal plain training."""
    sp = preset("digits-cnn")
    subnets = [UniformStream(sp, 0, 10)[j] for j in range(10)]
    ref = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared("serial"))
    want = (ref.losses, param_hashes(ref.model.global_named_parameters()))
    assert _replay(sp, 2, "bsp:1", "serial", subnets) == want
    assert _replay(sp, 1, "asp", "serial", subnets) == want
    assert _replay(sp, 2, "bsp:4", "serial", subnets) != want


# ---- real processes ------------------------------------------------------------------------------------------
CASES = [  # (space, stages, shared layers, jitter ms, policy, optimizer)
    ("tiny-transformer", 1, "frozen", 0, "csp", "sgd"),
    ("tiny-transformer", 2, "frozen", 0, "csp", "sgd"),
    ("tiny-transformer", 3, "frozen", 1.0, "csp", "sgd"),
    ("tiny-transformer", 4, "delayed:2", 0, "csp", "sgd"),
    ("tiny-transformer", 2, "delayed:2", 1.0, "csp", "sgd"),
    ("tiny-transformer", 3, "serial", 0, "csp", "sgd"),
    ("tiny-transformer", 2, "delayed:2", 0, "csp", "adam"),
    ("tiny-transformer", 3, "delayed:2", 0.5, "csp-chain", "sgd"),
    ("tiny-transformer", 3, "delayed:2", 1.0, "csp-plan:plan=7", "sgd"),  # the default's order with a plan
    ("digits-cnn", 1, "delayed:2", 0, "csp", "sgd"),
    ("digits-cnn", 2, "frozen", 1.0, "csp", "sgd"),
    ("digits-cnn", 3, "delayed:2", 0, "csp", "sgd"),
    ("digits-cnn", 4, "frozen", 0.5, "csp", "momentum"),
    ("digits-cnn", 3, "serial", 0, "csp-bw", "sgd"),
    ("digits-cnn", 2, "frozen", 0, "sequential", "sgd"),
]


@pytest.mark.parametrize("space,stages,shared,jitter,policy,optimizer", CASES)
def test_parallel_run_matches_the_reference_bit_for_bit(tmp_path, refs, space, stages, shared, jitter, policy,
                                                        optimizer):
    cfg = TrainConfig.create(space, tmp_path / "run", stages=stages, subnets=N, shared_layers=shared,
                             jitter_ms=jitter, policy=policy, optimizer=optimizer, progress=False, timeout=60,
                             sampler="uniform")  # (uniform: neighbours share candidates, CSP orders them)
    result = train(cfg)
    ok, msg = verify(cfg.out, refs(space, shared, N, optimizer))
    assert ok, msg
    assert result.verify(refs(space, shared, N, optimizer))[0]
    # the outputs every run has, in the shared formats
    m = json.loads((cfg.out / "metrics.json").read_text())
    assert m["config"]["shared_layers"] == shared and m["config"]["policy"] == policy
    assert m["config"]["stages"] == stages and m["config"]["optimizer"] == optimizer
    assert m["subnets_per_s"] > 0 and 0 < m["utilization"] <= 1 and m["overhead_share"] >= 0
    assert json.loads((cfg.out / "status.json").read_text()) == {"complete": True}
    trace = Trace.load(cfg.out / "trace.json")
    per_subnet = 3 if policy == "csp-bw" else 2
    assert len(trace.compute_events()) == N * stages * per_subnet
    lines = (cfg.out / "events.jsonl").read_text().splitlines()
    assert len(lines) == len(trace.compute_events()) and all(json.loads(x)["kind"] in "FBW" for x in lines)
    blocks = [[b for b in cfg.partition.blocks(s) if not cfg.space.blocks[b].fixed] for s in range(stages)]
    assert check_causal(trace, list(cfg.sequence), blocks, "W" if policy == "csp-bw" else "B") == []
    for part in (cfg.out / "parts").glob("stage*.json"):
        pid = json.loads(part.read_text())["pid"]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_measured_partition_changes_speed_not_results(tmp_path, refs):
    cfg = TrainConfig.create("tiny-transformer", tmp_path / "run", stages=2, subnets=N, balance="measured",
                             progress=False, shared_layers="frozen", sampler="uniform")
    bounds = cfg.partition.bounds
    assert bounds[0][0] == 0 and bounds[0][1] == bounds[1][0] and bounds[1][1] == cfg.space.num_blocks
    assert train(cfg).verify(refs("tiny-transformer", "frozen"))[0]
    assert json.loads((cfg.out / "metrics.json").read_text())["config"]["balance"] == "measured"


def test_asp_on_a_conflict_dense_space_differs_from_the_reference(tmp_path):
    """The hazard CSP prevents is real: 1F1B without the causal rule reads stale candidate weights."""
    sp = conflict_dense(1)
    subnets = [UniformStream(sp, 0, 16)[j] for j in range(16)]
    ref = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared("frozen"))
    (tmp_path / "ref").mkdir()
    write_losses(tmp_path / "ref" / "losses.csv", ref.losses)
    write_params(tmp_path / "ref" / "params.json", param_hashes(ref.model.global_named_parameters()))
    asp = train(TrainConfig.create(sp, tmp_path / "asp", stages=3, subnets=16, sequence=subnets, policy="asp",
                                   progress=False, shared_layers="frozen"))
    ok, msg = asp.verify(tmp_path / "ref")
    assert not ok and msg.startswith("subnet 1:"), msg  # subnet 1's forward ran before subnet 0's update
    csp = train(TrainConfig.create(sp, tmp_path / "csp", stages=3, subnets=16, sequence=subnets, policy="csp",
                                   progress=False, shared_layers="frozen"))
    assert csp.verify(tmp_path / "ref")[0]


@pytest.mark.parametrize("action,stage,expect", [
    ("raise", 1, "failed: InjectedFault: injected fault at"),
    ("kill", 0, "killed by signal SIGKILL"),
    ("exit", 2, "exited with code 3"),
])
def test_a_failed_stage_ends_the_run_quickly_naming_its_rank(tmp_path, action, stage, expect):
    cfg = TrainConfig.create("tiny-transformer", tmp_path / "run", stages=3, subnets=40, progress=False,
                             fault=f"{action}:{stage}:5", timeout=60)
    t0 = time.monotonic()
    with pytest.raises(TrainError) as err:
        train(cfg)
    assert time.monotonic() - t0 < 30
    assert err.value.rank == stage
    assert f"stage {stage} (rank {stage}" in str(err.value) and expect in str(err.value)
    status = json.loads((cfg.out / "status.json").read_text())
    assert status["complete"] is False and status["rank"] == stage
    assert (cfg.out / "events.jsonl").exists()  # what was written so far is kept


def test_a_hung_stage_is_caught_by_the_wait_timeout(tmp_path):
    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=2, subnets=20, progress=False,
                             fault="hang:1:3", timeout=2, shared_layers="frozen")
    t0 = time.monotonic()
    with pytest.raises(TrainError, match=r"stage 0 .*waited 2 s without a message; it needs gradients from "
                                         r"stage 1") as err:
        train(cfg)
    assert time.monotonic() - t0 < 30 and err.value.rank == 0


def test_bad_configurations_are_refused_before_any_process_starts(tmp_path):
    def bad(match: str, space="tiny-transformer", **kw):
        with pytest.raises(ConfigError, match=match):
            train(TrainConfig.create(space, tmp_path / "x", progress=False, **kw))

    bad("cost-only", space="naspipe-k12")
    bad("unknown policy", policy="gpipe")
    bad("unknown optimizer", optimizer="lbfgs")
    bad("window must be a whole number >= 1", window=0)
    bad("jitter_ms", jitter_ms=-1.0)
    bad("threads", threads=0)
    bad("timeout", timeout=0)
    bad("unknown shared-layer policy", shared_layers="sometimes")
    bad("cannot split", stages=11)
    bad("bad fault", fault="explode:0:1")
    bad("takes no argument", policy="csp:3")
    bad("own synchronisation", policy="bsp", shared_layers="delayed:2")
    bad("unknown option", colour="red")
    bad("unknown balance", balance="guess")
    assert not list(tmp_path.iterdir())  # nothing was created
    assert set(POLICIES) >= {"csp", "sequential", "bsp", "asp"}
    assert math.isfinite(DEFAULT_LR["sgd"])
