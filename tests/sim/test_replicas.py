"""The simulator's data-parallel replicas (``naspipe.sim.replicas``) and ``naspipe plan``."""

from __future__ import annotations

import json
import math

import pytest

from naspipe.cli import main
from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.sim.costs import batch_time_scale
from naspipe.sim.replicas import LinkModel, ReplicaCostModel, plan, simulate_replicas
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset, resolve_space
from tests.helpers.plans import few_plans

K96 = resolve_space("naspipe-k96")


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_four_stages_by_four_replicas_double_sixteen_stages(capsys):
    """The issue's acceptance: under the default link model 4 x 4 devices train at least twice as fast as 16 stages."""
    base = ["simulate", "--space", "naspipe-k96", "--subnets", "300", "--json",  # (1000: 2.16x; 300: 2.19x)
            "--sampler", "uniform"]  # (the acceptance's sequence; a fair one stalls 16 stages less)
    wide = _json(capsys, [*base, "--stages", "4", "--replicas", "4"])
    deep = _json(capsys, [*base, "--stages", "16", "--replicas", "1"])
    assert wide["devices"] == deep["devices"] == 16
    assert wide["throughput"] >= 2 * deep["throughput"], (wide["throughput"], deep["throughput"])
    assert 0 < wide["exchange_share"] < 0.5


def test_one_replica_is_the_plain_simulation():
    stream = UniformStream(K96, 1, 200)
    part = partition(K96, 4)
    plain = simulate(RunSpec.of(K96, part, stream, "csp"))
    one = simulate_replicas(RunSpec.of(K96, part, stream, "csp"))
    assert one.makespan == plain.makespan and one.extra["exchange_share"] == 0.0
    with pytest.raises(ValueError, match="own cost model"):  # (options.costs would be silently replaced)
        simulate_replicas(RunSpec.of(K96, part, stream, "csp"), SimOptions(costs=plain.costs))


@few_plans()  # a slow link against a free one, whichever plan each chooses
def test_tasks_run_at_the_replica_batch_and_writes_pay_the_exchange():
    stream = UniformStream(K96, 0, 4)
    part = partition(K96, 2)
    subs = [stream[j] for j in range(4)]
    from naspipe.sched.tasks import Task
    from naspipe.sim.costs import CostModel

    plain = CostModel(K96, part, subs)
    link = LinkModel(bandwidth=1e9, latency=1e-3)
    rc = ReplicaCostModel(K96, part, subs, replicas=4, link=link, alpha=0.1)
    f, b = Task("F", 1, 0), Task("B", 1, 0)
    assert rc.duration(f) == pytest.approx(plain.duration(f) * batch_time_scale(8, 32, 0.1))
    nbytes = rc.exchange_bytes(0, 1)
    assert nbytes > 0
    assert rc.duration(b) == pytest.approx(plain.duration(b) * 0.325 + 3 * (1e-3 + nbytes / 1e9))
    assert rc.transfer() == pytest.approx(plain.transfer() / 4 if plain.transfer() else 0.0)
    assert link.allreduce_seconds(nbytes, 4) < link.gather_seconds(nbytes, 4)
    run = RunSpec.of(K96, partition(K96, 4), UniformStream(K96, 0, 100), replicas=4)
    slow = simulate_replicas(run, link=LinkModel(10e9, 1e-5))
    fast = simulate_replicas(run, link=LinkModel(math.inf, 0.0))
    assert slow.makespan > fast.makespan and fast.extra["exchange_share"] == 0.0


def test_plan_ranks_every_split_of_the_devices():
    assert [(r["stages"], r["replicas"]) for r in plan("digits-cnn", 4, subnets=8)] == [
        (r["stages"], r["replicas"]) for r in plan(preset("digits-cnn"), 4, subnets=8)]  # a preset's name too
    for bad in ({"devices": 1.5}, {"subnets": 2.5}, {"seed": 1.5}):  # (a TypeError, or 2.5 subnets ranked)
        with pytest.raises(ValueError, match="must be a whole number"):
            plan(K96, **{"devices": 4, "subnets": 8, **bad})
    with pytest.raises(ValueError, match="generates the sequence from training losses"):  # (ranked uniform's)
        plan(K96, 4, subnets=8, sampler="evolution:2")
    rows = plan(K96, 8, subnets=100)
    assert {(r["stages"], r["replicas"]) for r in rows} == {(8, 1), (4, 2), (2, 4), (1, 8)}
    assert [r["throughput"] for r in rows] == sorted((r["throughput"] for r in rows), reverse=True)
    assert all(r["stages"] * r["replicas"] == 8 for r in rows)


def test_plan_cli_prints_its_table_and_refuses_bad_input(capsys):
    assert main(["plan", "--devices", "4", "--subnets", "50"]) == 0
    out = capsys.readouterr().out
    assert "stages x replicas" in out and "4 x 1" in out and "1 x 4" in out
    data = _json(capsys, ["plan", "--devices", "4", "--subnets", "50", "--json"])
    assert len(data["rows"]) == 3 and data["link"]["bandwidth"] == 300e9
    for argv, message in ((["plan", "--devices", "0"], "--devices"),
                          (["plan", "--devices", "4", "--link-bandwidth", "fast"], "--link-bandwidth"),
                          (["simulate", "--space", "naspipe-k96", "--replicas", "3"], "divide the batch size")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err


@few_plans()  # which plan wins is not the point here
def test_plan_says_what_a_sampler_changes_per_split(capsys):
    data = _json(capsys, ["plan", "--devices", "4", "--space", "naspipe-k12", "--subnets", "120", "--sampler", "fair",
                          "--json"])
    assert data["sampler"] == "fair"
    deep = next(r for r in data["rows"] if r["stages"] == 4)
    assert deep["speedup"] > 1.5
    assert deep["throughput"] == pytest.approx(deep["speedup"] * deep["uniform"]["throughput"])
    assert deep["sequence"]["conflicts"] < deep["uniform"]["sequence"]["conflicts"]
    assert deep["sequence"]["in_flight"] == 4
    assert main(["plan", "--devices", "2", "--space", "naspipe-k12", "--subnets", "40", "--sampler", "spread"]) == 0
    assert "sampler spread:fair against uniform" in capsys.readouterr().out
    assert "uniform" not in _json(capsys, ["plan", "--devices", "2", "--subnets", "20", "--json"])["rows"][0]
    for bad, message in (("evolution:4", "fixed up front"), ("fair:1", "takes no argument")):
        assert main(["plan", "--devices", "2", "--subnets", "20", "--sampler", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err


@pytest.mark.parametrize("argv", [["simulate", "--replicas", "2", "--policy", "bsp"],
                                  ["simulate", "--replicas", "2", "--policy", "pipemare"],
                                  ["simulate", "--replicas", "2", "--policy", "asp"],
                                  ["plan", "--devices", "4", "--policy", "asp"],
                                  ["plan", "--devices", "4", "--policy", "bsp:4"]])
def test_simulate_and_plan_refuse_replicas_with_a_policy_train_refuses(capsys, argv):
    """As ``train --replicas`` does: asynchronous policies and bsp cannot order their writes across replicas."""
    assert main([*argv, "--space", "digits-cnn", "--subnets", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "replicas > 1 work with the exact policies" in err, err
    assert f"not {argv[-1].partition(':')[0]}" in err


def test_simulate_refuses_a_native_exchange_without_replicas(capsys):
    assert main(["simulate", "--space", "digits-cnn", "--subnets", "10", "--replica-exchange", "native"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--replica-exchange native only applies with --replicas > 1" in err, err


def test_plan_of_one_device_and_one_replica_simulations_take_any_policy(capsys):
    assert [(r["stages"], r["replicas"]) for r in plan(resolve_space("digits-cnn"), 1, subnets=10, policy="asp")] == \
        [(1, 1)]
    assert main(["simulate", "--space", "digits-cnn", "--subnets", "10", "--policy", "pipemare"]) == 0
