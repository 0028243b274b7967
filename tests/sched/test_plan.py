"""The default order, ``csp-plan``, and its planner (torch-free).

* the factor of a task is a pure function of (plan, stage, kind, subnet), pinned to literal values (a recorded
  run's plan must mean the same factors in every process and every later version), and a scheduler's
  priorities do not depend on the order it is asked in;
* plan 0 is csp-cp's schedule exactly, and another plan changes the order;
* the planner keeps the shortest simulated makespan among its plans (the lowest plan on ties), is
  deterministic, never worse than csp-cp, and ``simulate``'s default runs it;
* bad plan options are refused in one line;
* a run prepared again in one process reads its plan (``remembered_plan``) unless what the choice reads changed.
"""

from __future__ import annotations

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import DEFAULT_POLICY, PolicyError, make_scheduler, plan_factor_unit, stage_specs
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.sim import SimOptions, choose_plan, simulate
from naspipe.sim.plan_choice import needs_plan, plan_tries, planned_policy
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset, space_from_dict
from tests.helpers.plans import few_plans


def _instance(seed: int = 2, n: int = 30):
    sp = preset("naspipe-k96")
    return sp, partition(sp, 4), UniformStream(sp, seed, n)


def _events(r) -> list[tuple]:  # noqa: ANN001
    return sorted((e.kind, e.subnet, e.stage, e.start, e.end) for e in r.trace.compute_events())


def test_the_factor_is_a_pure_function_of_the_task_pinned_to_literals():
    u = plan_factor_unit
    assert [u(1, 0, "F", 0), u(1, 0, "B", 0), u(1, 1, "F", 0), u(1, 0, "F", 1), u(2, 0, "F", 0),
            u(123456, 3, "W", 999)] == [0.1592044660884715, 0.36136978587098956, 0.7681764388358322,
                                        0.2970697949643454, 0.6534562044537713, 0.32366967782353584]
    values = [u(p, s, k, j) for p in range(1, 4) for s in range(3) for k in "FBW" for j in range(20)]
    assert all(0.0 <= v < 1.0 for v in values) and len(set(values)) == len(values)
    assert 0.45 < sum(values) / len(values) < 0.55  # spread over [0, 1)


def test_a_schedulers_priorities_belong_to_the_task_not_to_the_order_asked():
    sp, part, stream = _instance(n=12)
    spec = stage_specs(sp, part)[1]
    cp = make_scheduler("csp-cp", spec, stream)
    a, b = make_scheduler("csp-plan:plan=9,eps=0.5", spec, stream), make_scheduler("csp-plan:plan=9,eps=0.5", spec,
                                                                                  stream)
    for s in (cp, a, b):
        s._sync_chains()
    js = range(8)
    fa = [a._forward_priority(j) for j in js] + [a._backward_priority(j) for j in js]
    fb = [b._backward_priority(j) for j in reversed(js)][::-1]
    fb = [b._forward_priority(j) for j in reversed(js)][::-1] + fb
    assert fa == fb
    assert fa == [cp._forward_priority(j) * (1 + 0.5 * plan_factor_unit(9, 1, "F", j)) for j in js] + [
        cp._backward_priority(j) * (1 + 0.5 * plan_factor_unit(9, 1, "B", j)) for j in js]


def test_plan_zero_is_csp_cps_schedule_and_other_plans_change_it():
    sp, part, stream = _instance()
    cp = _events(simulate(RunSpec.of(sp, part, stream, "csp-cp")))
    assert _events(simulate(RunSpec.of(sp, part, stream, "csp-plan:plan=0"))) == cp
    assert _events(simulate(RunSpec.of(sp, part, stream, "csp-plan"), SimOptions(policy_options={"plan": 0}))) == cp
    assert any(_events(simulate(RunSpec.of(sp, part, stream, planned_policy(p)))) != cp for p in (1, 2, 3))


def test_the_planner_keeps_the_shortest_makespan_lowest_plan_on_ties_deterministically():
    sp, part, stream = _instance()
    runs = [simulate(RunSpec.of(sp, part, stream, planned_policy(p))).makespan for p in range(12)]
    best = min(runs)
    c = choose_plan(RunSpec.of(sp, part, stream), tries=12)
    assert (c.plan, c.makespan, c.baseline, c.tries) == (runs.index(best), best, runs[0], 12)
    assert c.result.makespan == best and c.result.extra["plan"]["policy"] == planned_policy(c.plan)
    again = choose_plan(RunSpec.of(sp, part, stream), tries=12)
    assert (again.plan, again.makespan) == (c.plan, c.makespan)
    assert best < runs[0]  # on this instance some plan beats csp-cp
    sp = preset("naspipe-k12")  # csp is optimal here: every plan ties, the lowest is kept
    part, stream = partition(sp, 4), UniformStream(sp, 0, 10)
    assert len({simulate(RunSpec.of(sp, part, stream, planned_policy(p))).makespan for p in range(12)}) == 1
    assert choose_plan(RunSpec.of(sp, part, stream), tries=12).plan == 0


def test_simulates_default_plans_first_and_is_never_worse_than_csp_cp():
    assert DEFAULT_POLICY == "csp-plan"
    assert (plan_tries(30), plan_tries(1000), plan_tries(10**6), plan_tries(1)) == (200, 6, 1, 200)
    sp, part, stream = _instance(n=30)
    r = simulate(RunSpec.of(sp, part, stream))
    chosen = r.extra["plan"]
    assert chosen["tries"] == 200 and chosen["plan0_makespan"] == simulate(RunSpec.of(sp, part, stream,
                                                                                      "csp-cp")).makespan
    assert r.makespan == chosen["makespan"] <= chosen["plan0_makespan"]
    assert _events(r) == _events(simulate(RunSpec.of(sp, part, stream, chosen["policy"])))  # the plan replays its run
    # a plan named by the caller is respected: no planning
    assert "plan" not in simulate(RunSpec.of(sp, part, stream, "csp-plan:plan=4")).extra


def test_needs_plan_and_bad_options():
    assert needs_plan("csp-plan") and needs_plan("csp-plan:eps=0.1")
    assert not needs_plan("csp-plan:plan=3") and not needs_plan("csp-cp") and not needs_plan("bsp:4")
    assert not needs_plan("csp-plan", {"plan": 2}) and needs_plan("csp-plan", {"micro_batches": None})
    sp, part, stream = _instance(n=4)
    spec = stage_specs(sp, part)[0]
    for bad in ("csp-plan:plan=-1", "csp-plan:plan=x", "csp-plan:eps=11", "csp-plan:plan=1.5"):
        with pytest.raises(PolicyError) as e:
            make_scheduler(bad, spec, stream)
        assert "\n" not in str(e.value)
    with pytest.raises(PolicyError, match="csp-plan option .plan. must be >= 0, got -2"):
        make_scheduler("csp-plan", spec, stream, plan=-2)
    # keyword options meet the rules of the policy's declaration, the same as those in the policy string
    with pytest.raises(PolicyError) as text:
        make_scheduler("csp-plan:eps=11", spec, stream)
    with pytest.raises(PolicyError) as keyword:
        make_scheduler("csp-plan", spec, stream, eps=11)
    assert str(text.value) == str(keyword.value) == "csp-plan needs plan >= 0 (a whole number) and eps in [0, 10], " \
        "got 0, 11.0"
    with pytest.raises(PolicyError, match="bad value 1.5 for csp-plan option 'plan'"):
        make_scheduler("csp-plan", spec, stream, plan=1.5)
    assert make_scheduler("csp-plan", spec, stream, plan=2, eps=1).eps == 1.0  # an int stands for a float


@few_plans()  # the same choice twice, memory-free, among 8 plans (the 200 are the test above)
def test_a_memory_aware_default_plans_memory_free_then_runs_its_plan_with_memory():
    from naspipe.sim import MemoryConfig

    sp = preset("naspipe-k48")
    part, stream, mem = partition(sp, 4), UniformStream(sp, 1, 20), MemoryConfig(device_memory="25%")
    r = simulate(RunSpec.of(sp, part, stream), SimOptions(memory=mem))
    chosen = choose_plan(RunSpec.of(sp, part, stream))
    assert r.extra["plan"] == chosen.summary() and r.memory is not None
    assert _events(r) == _events(simulate(RunSpec.of(sp, part, stream, chosen.policy), SimOptions(memory=mem)))


def test_a_run_prepared_again_reads_its_plan_and_whatever_the_choice_reads_chooses_anew(monkeypatch):
    """``remembered_plan``: the choice ``choose_plan`` makes, simulated once per process; a changed cost model (the
    run's space or its sequence's), sequence, partition, window, shared layers, eps, planner class or plan count
    simulates again, and every answer is the one a fresh choice gives."""
    import dataclasses

    import naspipe.sched.registry as registry
    import naspipe.sim.engine as engine
    from naspipe.sim import remembered_plan
    from naspipe.spaces.shared import parse_shared
    from tests.helpers.plans import FEW

    calls = []
    monkeypatch.setattr(engine, "choose_plan", lambda run, *a, **k: calls.append(run) or choose_plan(run, *a, **k))
    monkeypatch.setattr(engine, "_REMEMBERED", {})
    monkeypatch.setattr("naspipe.sim.plan_choice.MAX_PLANS", FEW)  # (the 200 are the tests above)
    sp, part, stream = _instance(n=12)
    first = remembered_plan(RunSpec.of(sp, part, stream))
    assert first == choose_plan(RunSpec.of(sp, part, stream)).policy and len(calls) == 1
    assert remembered_plan(RunSpec.of(sp, part, stream)) == first and len(calls) == 1  # read, not simulated
    d = sp.to_dict()
    for b in (1, 5):
        d["blocks"][b]["candidates"][0]["fwd"] *= 3  # another cost model: the schedule's costs changed
    slower = space_from_dict(d)
    on_slower = ReplayStream(slower, [stream[j] for j in range(12)])
    changed = [RunSpec.of(slower, part, on_slower),
               RunSpec.of(sp, part, on_slower),  # the critical paths read the sequence's space
               RunSpec.of(sp, part, UniformStream(sp, 5, 12)),  # another sequence
               RunSpec.of(sp, partition(sp, 3), stream),
               RunSpec.of(sp, part, stream, window=3),
               RunSpec.of(sp, part, stream, shared=parse_shared("serial")),
               RunSpec.of(sp, part, stream, "csp-plan:eps=0.1")]
    for n, run in enumerate(changed, 2):
        assert remembered_plan(run) == choose_plan(run).policy and len(calls) == n, run
    planner = registry.get_policy("csp-plan")
    mine = type("MyPlanned", (planner.scheduler,), {})  # a notebook redefines the default policy's scheduler
    monkeypatch.setitem(registry._REGISTRY, "csp-plan", dataclasses.replace(planner, scheduler=mine))
    remembered_plan(RunSpec.of(sp, part, stream))
    assert len(calls) == len(changed) + 2
    monkeypatch.setitem(registry._REGISTRY, "csp-plan", planner)
    monkeypatch.setattr("naspipe.sim.plan_choice.MAX_PLANS", FEW + 1)  # another plan count
    remembered_plan(RunSpec.of(sp, part, stream))
    assert len(calls) == len(changed) + 3


def test_a_planned_scheduler_keeps_the_factors_of_the_subnets_in_flight_alone():
    """The factors a planned stage hashes once are dropped when their subnet is done on the stage: a long run's
    scheduler holds those of its window, not one per subnet trained."""
    from naspipe.sim.engine import _Run

    sp = preset("naspipe-k48")
    part, stream = partition(sp, 4), UniformStream(sp, 3, 400)
    run = _Run(RunSpec.of(sp, part, stream, planned_policy(5), window=16), SimOptions())
    run.run()
    assert all(len(s._factors) <= 2 * 16 for s in run.scheds), [len(s._factors) for s in run.scheds]
