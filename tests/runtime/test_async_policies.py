"""The asynchronous baselines in the runtime (``naspipe.runtime.update_rules.async_rules``): exact checks.

TECHNIQUES.md section 7: every policy with one stage equals plain training; bsp with ``M`` subnets equals
one averaged step; pipeoptim with ``s = 0`` equals no-stash asynchrony; measured weight-version lags match
the theory (stash F = B = P-1-i; async F = P-1-i, B = 0; 2BW 1; GPipe 0), both from the real executors
replaying a simulated 1F1B schedule and from a real 4-stage multi-process run.
"""

from __future__ import annotations

import json

import pytest
import torch

from naspipe.models import build_stage, make_batch, make_optimizer
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes
from naspipe.runtime import ConfigError, TrainConfig, train
from naspipe.runtime.replay import replay_schedule
from naspipe.runtime.update_rules.async_rules import lags_from_events, lags_from_reads
from naspipe.sched.async_options import AsyncOptionError, parse_async_options
from naspipe.sched.policies import POLICIES, PolicyError, make_scheduler, stage_specs
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.spaces.partition import partition
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import preset

ASYNC = ["pipedream", "pipedream:vsync", "2bw", "pipemare:t1=5,t2=0.1,warmup=3", "pipeoptim", "pipeoptim:s=inflight"]


def replay(space, stages: int, policy: str, shared: str, subnets, *, seed: int = 0, optimizer: str = "sgd"):
    """The real executors run in the order of a simulated schedule (one process, tensors by hand)."""
    losses, execs = replay_schedule(space, stages, policy, subnets, seed=seed, shared=shared, optimizer=optimizer)
    hashes: dict = {}
    for ex in execs:
        hashes.update(param_hashes(ex.model.global_named_parameters()))
    return losses, hashes, execs


@pytest.fixture(scope="module")
def digits():
    sp = preset("digits-cnn")
    return sp, [UniformStream(sp, 0, 12)[j] for j in range(12)]


def test_the_new_policies_are_registered_with_the_1f1b_scheduler():
    for name in ("pipedream", "2bw", "pipemare", "pipeoptim", "bsp"):
        assert name in POLICIES
    sp = preset("digits-cnn")
    spec = stage_specs(sp, partition(sp, 2))[0]
    s = make_scheduler("pipemare:t1=10,warmup=2", spec, UniformStream(sp, 0, 4))
    assert s.name == "pipemare" and s.warmup == 2 and s.limit == 2
    with pytest.raises(PolicyError, match="no option"):
        make_scheduler("pipemare:lr=3", spec, UniformStream(sp, 0, 4))
    with pytest.raises(AsyncOptionError):
        parse_async_options("pipemare:t2=1.5")
    assert parse_async_options("2bw:8") == {"group": 8}
    assert parse_async_options("pipeoptim:s=inflight,offset=1") == {"s": "inflight", "offset": 1}
    with pytest.raises(ConfigError, match="frozen or serial"):
        TrainConfig.create("digits-cnn", "/tmp/unused", stages=2, subnets=4, policy="pipemare",
                           shared_layers="delayed:2")


@pytest.mark.parametrize("shared", ["frozen", "serial"])
def test_every_policy_with_one_stage_is_plain_training(digits, shared):
    sp, subnets = digits
    ref = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared(shared), optimizer="momentum")
    want = (ref.losses, param_hashes(ref.model.global_named_parameters()))
    for policy in ["asp", "bsp:1", *ASYNC]:
        losses, hashes, _ = replay(sp, 1, policy, shared, subnets, optimizer="momentum")
        assert (losses, hashes) == want, policy


def test_bsp_with_m_subnets_is_one_averaged_step_per_group(digits):
    sp, subnets = digits
    m = 4
    model = build_stage(sp, range(sp.num_blocks), 0, parse_shared("frozen"))
    opt = make_optimizer(model.parameters(), "sgd")
    losses = {}
    for g in range(len(subnets) // m):
        opt.zero_grad(set_to_none=True)
        for j in range(g * m, (g + 1) * m):  # gradients accumulate in subnet order
            x, target = make_batch(sp, 0, j)
            loss = model.loss(model(x, subnets[j]), target)
            loss.backward()
            losses[j] = loss.item()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.div_(m)
        opt.step()
    want = (losses, param_hashes(model.global_named_parameters()))
    assert replay(sp, 1, f"bsp:{m}", "frozen", subnets)[:2] == want
    assert replay(sp, 3, f"bsp:{m}", "frozen", subnets)[:2] == want  # the pipeline changes nothing
    assert replay(sp, 1, f"2bw:{m}", "frozen", subnets)[:2] == want  # 2bw on one stage: no delay, = GPipe


def test_pipeoptim_with_s_zero_is_no_stash_asynchrony_and_prediction_changes_it(digits):
    sp, subnets = digits
    for opt in ("momentum", "adam"):
        mare = replay(sp, 4, "pipemare", "serial", subnets, optimizer=opt)[:2]
        assert replay(sp, 4, "pipeoptim:s=0", "serial", subnets, optimizer=opt)[:2] == mare
        assert replay(sp, 4, "pipeoptim", "serial", subnets, optimizer=opt)[:2] != mare


def test_asynchronous_policies_differ_from_the_reference_on_four_stages(digits):
    sp, subnets = digits
    ref = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared("serial"))
    want = param_hashes(ref.model.global_named_parameters())
    for policy in ("pipedream", "2bw", "pipemare", "pipeoptim"):
        assert replay(sp, 4, policy, "serial", subnets)[1] != want, policy


THEORY = {  # policy -> (F lag, B lag) on stage i of P in steady state
    "pipedream": lambda i, p: (p - 1 - i, p - 1 - i),
    "pipemare": lambda i, p: (p - 1 - i, 0),
    "pipeoptim": lambda i, p: (p - 1 - i, 0),
    "2bw": lambda i, p: (1, 1),
    "bsp:4": lambda i, p: (0, 0),
}


@pytest.mark.parametrize("policy", sorted(THEORY))
def test_measured_lags_of_a_replayed_schedule_match_the_theory(digits, policy):
    sp, subnets = digits
    p = 4
    _, _, execs = replay(sp, p, policy, "frozen", subnets)
    group = 4 if policy in ("2bw", "bsp:4") else 1
    for i, ex in enumerate(execs):
        lags = lags_from_reads(ex.rule.reads, group)
        assert sorted(lags) == list(range(len(subnets)))
        want = THEORY[policy](i, p)
        if group > 1:  # group versions do not depend on timing
            assert {lags[j] for j in range(p, len(subnets))} == {want}, (i, lags)
            continue
        # per-subnet policies: variable task costs may shorten a forward lag (a gradient arrives before the
        # forward is chosen), never lengthen it; the theory's lag is reached
        assert max(f for f, _ in lags.values()) == want[0], (i, lags)
        for f, b in lags.values():
            assert f <= want[0] and b == (f if policy == "pipedream" else 0)


def test_measured_lags_of_a_real_four_stage_run(tmp_path):
    """Real processes: the versions each task read are in the trace; the lags never exceed the theory and
    reach it on every stage (timing may shorten a lag, never lengthen it)."""
    for policy in ("pipedream", "pipemare"):
        cfg = TrainConfig.create("digits-cnn", tmp_path / policy, stages=4, subnets=16, policy=policy,
                                 progress=False, timeout=60)
        train(cfg)
        events = [json.loads(x) for x in (cfg.out / "events.jsonl").read_text().splitlines()]
        assert all("version" in e for e in events)
        per_stage = lags_from_events(events, group=4 if policy == "2bw" else 1)
        for i, lags in per_stage.items():
            want = THEORY[policy](i, 4)
            assert len(lags) == 16
            assert max(f for f, _ in lags.values()) == want[0]
            assert max(b for _, b in lags.values()) == want[1]


def test_t2_and_t1_and_warmup_change_pipemare_and_warmup_is_synchronous(digits):
    sp, subnets = digits
    ref = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared("frozen"))
    base = replay(sp, 4, "pipemare", "frozen", subnets)
    for opt in ("t1=5", "t2=0.1"):
        assert replay(sp, 4, f"pipemare:{opt}", "frozen", subnets)[:2] != base[:2], opt
    # a warm-up as long as the run is the sequential run
    assert replay(sp, 4, f"pipemare:warmup={len(subnets)}", "frozen", subnets)[:2] == (
        ref.losses, param_hashes(ref.model.global_named_parameters()))
    losses, _, execs = replay(sp, 4, "pipemare:warmup=6", "frozen", subnets)
    lags = lags_from_reads(execs[0].rule.reads)
    assert all(lags[j] == (0, 0) for j in range(6)) and lags[11] == (3, 0)
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())


# ---- delayed:D with PipeOptim prediction and PipeMare T1 on the shared layers --------------------------------
def test_shared_layer_corrections_parse_and_round_trip():
    for text in ("delayed:4+predict", "delayed:4+t1=200", "delayed:2+predict+t1=5"):
        sh = parse_shared(text)
        assert str(sh) == text and parse_shared(str(sh)) == sh and sh.trains_shared
    assert parse_shared("delayed:3+t1=7").t1 == 7 and not parse_shared("delayed:3+t1=7").predict
    for bad in ("serial+predict", "frozen+t1=3", "delayed:2+t1", "delayed:2+t1=0", "delayed:2+guess"):
        with pytest.raises(ValueError):
            parse_shared(bad)


@pytest.mark.parametrize("shared,opt", [("delayed:2+predict", "momentum"), ("delayed:3+t1=6", "sgd"),
                                        ("delayed:2+predict+t1=4", "adam")])
def test_corrected_delayed_shared_layers_stay_reproducible(digits, shared, opt):
    """The reference implements the corrections; csp on 3 stages matches it bit for bit, and the corrections
    change the result (they are not no-ops)."""
    sp, subnets = digits
    ref = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared(shared), optimizer=opt)
    want = (ref.losses, param_hashes(ref.model.global_named_parameters()))
    assert replay(sp, 3, "csp", shared, subnets, optimizer=opt)[:2] == want
    plain = train_reference(sp, ReplayStream(sp, subnets), 0, parse_shared(shared.split("+")[0]), optimizer=opt)
    assert param_hashes(plain.model.global_named_parameters()) != want[1]


def test_corrected_delayed_shared_layers_in_a_real_run(tmp_path):
    from naspipe.runfolder.results import verify, write_losses, write_params

    shared = "delayed:2+predict+t1=5"
    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=2, subnets=8, policy="csp",
                             shared_layers=shared, optimizer="momentum", progress=False, timeout=60)
    train(cfg)
    ref = train_reference(cfg.space, ReplayStream(cfg.space, list(cfg.sequence)), 0, parse_shared(shared),
                          optimizer="momentum")
    (tmp_path / "ref").mkdir()
    write_losses(tmp_path / "ref" / "losses.csv", ref.losses)
    write_params(tmp_path / "ref" / "params.json", param_hashes(ref.model.global_named_parameters()))
    ok, msg = verify(cfg.out, tmp_path / "ref")
    assert ok, msg
    assert json.loads((cfg.out / "metrics.json").read_text())["config"]["shared_layers"] == shared


def test_pipedream_vertical_sync_reads_one_version_per_subnet_and_is_reproducible(digits):
    from naspipe.runtime.replay import replay_schedule

    sp, subnets = digits
    losses, execs = replay_schedule(sp, 4, "pipedream:vsync", subnets, optimizer="momentum", shared="serial")
    for ex in execs:  # every stage: F = B = P-1 once the pipeline is full
        lags = lags_from_reads(ex.rule.reads)
        assert {lags[j] for j in range(3, len(subnets))} == {(3, 3)}
    other, execs2 = replay_schedule(sp, 4, "pipedream:vsync", subnets, optimizer="momentum", shared="serial",
                                    jitter=0.5, seed=0)  # another task order, same bits
    hashes = [param_hashes(e.model.global_named_parameters()) for e in execs]
    assert other == losses and [param_hashes(e.model.global_named_parameters()) for e in execs2] == hashes
