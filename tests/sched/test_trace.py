"""Traces: utilisation and makespan on a hand-made trace, JSON and Chrome-trace I/O, the causal checker."""

from __future__ import annotations

import json

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sched.trace import Trace, TraceEvent, check_causal
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset


def _hand_trace() -> Trace:
    """2 stages: stage 0 busy 3 of 5, stage 1 busy 2 of 5; a prefetch that is not compute."""
    t = Trace(2, meta={"policy": "csp"})
    t.add(0, "F", 0, 0.0, 1.0)
    t.add(1, "F", 0, 1.0, 2.0)
    t.add(1, "B", 0, 2.0, 3.0)
    t.add(0, "B", 0, 3.0, 4.0)
    t.add(0, "W", 0, 4.0, 5.0)
    t.add(1, "prefetch", 1, 0.0, 9.0, bytes=1024)
    return t


def test_makespan_busy_and_utilisation() -> None:
    t = _hand_trace()
    assert t.makespan == 5.0  # memory events do not count
    assert t.busy() == [3.0, 2.0]
    assert t.utilization() == pytest.approx(5.0 / (2 * 5.0))
    assert t.stage_utilization() == [pytest.approx(0.6), pytest.approx(0.4)]
    assert t.subnets() == 1
    assert len(t.compute_events()) == 5


def test_empty_trace() -> None:
    t = Trace(3)
    assert t.makespan == 0.0 and t.utilization() == 0.0 and t.stage_utilization() == [0.0] * 3


def test_shifted_moves_every_event() -> None:
    t = _hand_trace().shifted(10.0)
    assert t.events[0].start == 10.0 and t.events[-1].end == 19.0
    assert _hand_trace().events[0].start == 0.0  # the original is unchanged


def test_json_round_trip(tmp_path) -> None:
    t = _hand_trace()
    p = tmp_path / "trace.json"
    t.save(p)
    data = json.loads(p.read_text())
    assert data["format"] == "naspipe-trace/1" and data["stages"] == 2
    assert "bytes" not in data["events"][0] and "version" not in data["events"][0]
    back = Trace.load(p)
    assert back.stages == 2 and back.meta == {"policy": "csp"}
    key = lambda e: (e.start, e.stage, e.kind)
    assert sorted(back.events, key=key) == sorted(t.events, key=key)
    with pytest.raises(ValueError, match="not a naspipe trace"):
        Trace.from_dict({"stages": 1, "events": []})


def test_simulated_trace_round_trips(tmp_path) -> None:
    sp = preset("naspipe-k12")
    r = simulate(RunSpec.of(sp, partition(sp, 4), UniformStream(sp, 0, 30), "csp-bw"))
    p = tmp_path / "t.json"
    r.trace.save(p)
    back = Trace.load(p)
    assert back.makespan == r.trace.makespan and back.utilization() == pytest.approx(r.trace.utilization())
    assert back.meta["policy"] == "csp-bw"


def test_chrome_export(tmp_path) -> None:
    t = _hand_trace()
    p = tmp_path / "chrome.json"
    t.save_chrome(p)
    data = json.loads(p.read_text())
    names = [e for e in data["traceEvents"] if e["ph"] == "M"]
    assert [(e["tid"], e["args"]["name"]) for e in names] == [(0, "stage 0"), (1, "stage 1")]
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 6
    f0 = next(e for e in xs if e["name"] == "F0" and e["tid"] == 1)
    assert f0["ts"] == 1e6 and f0["dur"] == 1e6 and f0["cat"] == "F" and f0["args"] == {"subnet": 0}
    pre = next(e for e in xs if e["name"] == "prefetch")
    assert pre["args"]["bytes"] == 1024
    assert data["otherData"] == {"policy": "csp"}


def test_event_to_dict_keeps_optional_fields_when_set() -> None:
    e = TraceEvent(0, "F", 3, 0.0, 1.0, bytes=5, version=2)
    assert e.to_dict() == {"stage": 0, "kind": "F", "subnet": 3, "start": 0.0, "end": 1.0, "bytes": 5, "version": 2}
    assert e.duration == 1.0


# ---- the causal checker ----------------------------------------------------------------------------
SUBNETS = [(0, 0), (0, 1), (1, 1)]
STAGE_BLOCKS = [[0], [1]]


def _trace(events: list[tuple[int, str, int, float, float]]) -> Trace:
    t = Trace(2)
    for s, k, j, a, b in events:
        t.add(s, k, j, a, b)
    return t


GOOD = [(0, "F", 0, 0, 1), (0, "F", 2, 1, 2), (1, "F", 0, 1, 2), (1, "B", 0, 2, 3), (0, "B", 0, 3, 4),
        (0, "F", 1, 4, 5), (1, "F", 1, 5, 6), (1, "B", 1, 6, 7), (1, "F", 2, 7, 8), (0, "B", 1, 7, 8),
        (1, "B", 2, 8, 9), (0, "B", 2, 9, 10)]


def test_check_causal_accepts_a_valid_schedule() -> None:
    assert check_causal(_trace(GOOD), SUBNETS, STAGE_BLOCKS) == []


def test_check_causal_names_the_violation() -> None:
    bad = [e if e[:3] != (0, "F", 1) else (0, "F", 1, 3.5, 4.5) for e in GOOD]  # F(1,0) before B(0,0) ends
    assert check_causal(_trace(bad), SUBNETS, STAGE_BLOCKS) == ["F(1,0) starts before B(0,0) ends (block 0)"]
    bad = [e if e[:3] != (1, "F", 2) else (1, "F", 2, 6.5, 7.5) for e in GOOD]
    assert check_causal(_trace(bad), SUBNETS, STAGE_BLOCKS) == ["F(2,1) starts before B(1,1) ends (block 1)"]


def test_check_causal_with_split_backward_waits_on_w() -> None:
    evs = [(0, "F", 0, 0, 1), (0, "B", 0, 1, 2), (0, "W", 0, 2, 3), (0, "F", 1, 2.5, 3.5)]
    t = _trace(evs)
    assert check_causal(t, [(0, 0), (0, 0)], [[0], []], write_kind="B") == []
    assert check_causal(t, [(0, 0), (0, 0)], [[0], []], write_kind="W") == [
        "F(1,0) starts before W(0,0) ends (block 0)"]


def test_check_causal_flags_a_missing_write() -> None:
    t = _trace([(0, "F", 0, 0, 1), (0, "F", 1, 1, 2)])
    assert check_causal(t, [(0, 0), (0, 0)], [[0], []]) == ["F(1,0) starts before B(0,0) ends (block 0)"]
