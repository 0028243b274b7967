"""``naspipe train --device-memory``: candidates in host memory, a byte-budgeted device cache (CPU buffer
pool), predictive prefetch against on-demand swapping; the run still verifies against the reference."""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main
from naspipe.sched.trace import Trace

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

COMMON = ["--space", "tiny-transformer", "--subnets", "30", "--seed", "3", "--no-progress",
          "--sampler", "uniform"]  # (neighbours share candidates: the in-flight set fits 80%; not so with fair)


def test_train_under_a_device_budget_verifies_and_prefetches(tmp_path):
    ref, pred, od = tmp_path / "ref", tmp_path / "pred", tmp_path / "od"
    assert main(["reference", *COMMON, "--out", str(ref)]) == 0
    train = ["train", *COMMON, "--stages", "2", "--device-memory", "80%"]
    assert main([*train, "--swap", "predictive", "--out", str(pred)]) == 0
    assert main([*train, "--swap", "on-demand", "--out", str(od)]) == 0
    mems = {}
    for run in (pred, od):
        assert main(["verify", str(run), str(ref)]) == 0  # bit-identical to the sequential reference
        m = json.loads((run / "metrics.json").read_text())["memory"]
        mems[run.name] = m
        for s in m["stages"]:  # below the stage's supernet share, and never above the budget
            assert s["budget_bytes"] < s["supernet_share_bytes"]
            assert 0 < s["peak_device_bytes"] <= s["budget_bytes"]
        assert m["bytes_moved"] > 0 and 0 <= m["stall_share"] < 1
    assert mems["pred"]["hit_rate"] >= 0.95, mems["pred"]
    assert mems["od"]["hit_rate"] < mems["pred"]["hit_rate"]
    kinds = {e.kind for e in Trace.load(pred / "trace.json").events}
    assert "prefetch" in kinds
    ev = [e for e in Trace.load(od / "trace.json").events if e.kind in ("stall", "evict", "prefetch")]
    assert any(e.kind == "stall" and e.bytes > 0 for e in ev) and any(e.kind == "evict" for e in ev)


@pytest.mark.parametrize("extra", [["--swap", "on-demand"], ["--pin", "task"], ["--prefetch-depth", "2"]])
def test_swapping_options_without_a_budget_are_refused(tmp_path, capsys, extra):
    assert main(["train", *COMMON, "--stages", "2", *extra, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{extra[0]} only apply with --device-memory" in err[0], err
    assert not (tmp_path / "r").exists()


def test_a_budget_below_one_subnet_is_refused_before_any_process(tmp_path, capsys):
    assert main(["train", *COMMON, "--stages", "2", "--device-memory", "5%", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "less than one subnet's candidates" in err[0]
    assert not (tmp_path / "r").exists()
    assert main(["train", *COMMON, "--device-memory", "lots", "--out", str(tmp_path / "r")]) == 2


def test_resident_swap_keeps_the_share_on_the_device_or_refuses(tmp_path, capsys):
    ref, res = tmp_path / "ref", tmp_path / "res"
    common = [*COMMON[:3], "12", *COMMON[4:]]
    assert main(["reference", *common, "--out", str(ref)]) == 0
    # the whole share plus its sgd state does not fit 80%: refused before any process, one line
    assert main(["train", *common, "--stages", "2", "--device-memory", "80%", "--swap", "resident",
                 "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--swap resident keeps" in err[0] and not (tmp_path / "no").exists()
    assert main(["train", *common, "--stages", "2", "--device-memory", "300%", "--swap", "resident",
                 "--out", str(res)]) == 0
    assert main(["verify", str(res), str(ref)]) == 0
    m = json.loads((res / "metrics.json").read_text())["memory"]
    assert m["swap"] == "resident" and m["hit_rate"] == 1.0 and m["stall_share"] == 0
    for s in m["stages"]:  # loaded before the clock starts, never moved during the run
        assert s["peak_device_bytes"] >= s["supernet_share_bytes"] and s["evictions"] == 0


def test_optimizer_state_stays_inside_the_budget(tmp_path):
    """Adam creates its state during the first step on the device; the cache sets its room aside up front, so
    the peak never passes the budget, and the run still verifies."""
    ref, run = tmp_path / "ref", tmp_path / "run"
    common = [*COMMON[:3], "16", *COMMON[4:], "--optimizer", "adam"]
    assert main(["reference", *common, "--out", str(ref)]) == 0
    assert main(["train", *common, "--stages", "2", "--device-memory", "60%", "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    m = json.loads((run / "metrics.json").read_text())["memory"]
    for s in m["stages"]:
        assert 0 < s["peak_device_bytes"] <= s["budget_bytes"], s
    assert m["bytes_moved"] > 0


def test_killed_after_a_checkpoint_then_resumed_under_a_budget(tmp_path):
    """Context switching with checkpoints: SGD with momentum (its state travels with the candidates), a
    checkpoint every 8 subnets, stage 1 killed at subnet 20, resumed in place: identical to the reference."""
    ref, run = tmp_path / "ref", tmp_path / "run"
    common = [*COMMON[:3], "28", *COMMON[4:], "--optimizer", "momentum"]
    train = ["train", *common, "--stages", "2", "--device-memory", "70%", "--checkpoint-every", "8"]
    assert main(["reference", *common, "--out", str(ref)]) == 0
    assert main([*train, "--out", str(run), "--fault", "kill:1:20"]) == 1
    assert json.loads((run / "status.json").read_text())["checkpoint"] == 16
    assert main([*train, "--resume", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert m["config"]["resumed_from"] == 16 and m["memory"]["bytes_moved"] > 0
    for s in m["memory"]["stages"]:
        assert s["peak_device_bytes"] <= s["budget_bytes"]


def test_the_runtime_forecast_runs_the_stage_scheduler_speculatively():
    """Stage 1 of 2 has the activations of subnets 2 and 5 (not 0, 1): the forecast names the forwards its
    scheduler would start from what is here first, then the lowest subnets not forwarded yet."""
    import time

    from naspipe import preset
    from naspipe.models import build_stage
    from naspipe.runtime.layer_cache.switching import ContextSwitch
    from naspipe.sched.policies import make_scheduler, stage_specs
    from naspipe.sequences.sequence import UniformStream
    from naspipe.spaces.partition import partition
    from naspipe.spaces.shared import SharedLayers

    sp = preset("tiny-transformer")
    part = partition(sp, 2)
    stream = UniformStream(sp, 3, 12)
    sched = make_scheduler("csp", stage_specs(sp, part)[1], stream)
    model = build_stage(sp, part.blocks(1), 3, SharedLayers())
    mem = ContextSwitch(model, None, stream, 12, device_memory="100%", swap="predictive", depth=4, optimizer="sgd",
                      write_kind=sched.write_kind, clock=time.perf_counter, timeout=10.0)
    try:
        assert mem.forecast(sched) == [0, 1, 2, 3]  # nothing here yet: sequence order
        for j in (5, 2):
            sched.on_activation(j)
        fc = mem.forecast(sched)  # F(2) first; F(5) too unless an older subnet it conflicts with blocks it
        assert fc in ([2, 5, 0, 1], [2, 0, 1, 3]), fc
        assert sched.next_task().subnet == 2  # the speculation left the scheduler as it was
    finally:
        mem.close()


@pytest.fixture(scope="module")
def ref24(tmp_path_factory):
    """The sequential reference of ``COMMON`` with 24 subnets (one for the three policies below)."""
    ref = tmp_path_factory.mktemp("ref24") / "ref"
    assert main(["reference", *COMMON[:3], "24", *COMMON[4:], "--out", str(ref)]) == 0
    return ref


@pytest.mark.parametrize("policy", ["csp", "csp-cp", "csp-bw"])
def test_pinned_per_task_the_layers_leave_between_forward_and_backward(tmp_path, ref24, policy):
    """``--pin task``: autograd saves the candidates by reference, so they may be evicted while their subnet
    waits for its backward and loaded again for it; the run stays identical to the reference."""
    ref, run = ref24, tmp_path / "run"
    common = [*COMMON[:3], "24", *COMMON[4:]]
    assert main(["train", *common, "--stages", "2", "--policy", policy, "--device-memory", "40%", "--pin", "task",
                 "--jitter-ms", "1", "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    m = json.loads((run / "metrics.json").read_text())["memory"]
    assert all(s["pin"] == "task" for s in m["stages"])
    backward_misses = sum(s["tasks"] - s["task_hits"] - (s["forwards"] - s["forward_hits"]) for s in m["stages"])
    assert backward_misses > 0  # some backward found its layers gone and loaded them again
    for s in m["stages"]:
        assert s["peak_device_bytes"] <= s["budget_bytes"]
