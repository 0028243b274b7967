"""naspipe.viz.repro: run digests, the hash table, the reference writer, conflict-dense spaces, TrainJob."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest

from naspipe.experiments.jobs import Job, TrainJob, start_reference, write_reference
from naspipe.runfolder.results import ResultsError, verify, write_losses, write_params
from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import preset
from naspipe.viz.repro import (
    conflict_dense,
    digests_json,
    hash_table,
    hash_table_figure,
    loss_curves,
    run_digest,
    schedule_digest,
    summary,
)

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def _run(d, losses, params):
    d.mkdir(parents=True)
    write_losses(d / "losses.csv", losses)
    write_params(d / "params.json", params)
    return d


def test_run_digest_is_stable_and_sees_every_bit(tmp_path):
    a = _run(tmp_path / "a", {0: 1.5, 1: 0.25}, {"w": "aa", "b": "bb"})
    b = _run(tmp_path / "b", {1: 0.25, 0: 1.5}, {"b": "bb", "w": "aa"})  # same content, other insertion order
    c = _run(tmp_path / "c", {0: 1.5, 1: 0.25 + 2 ** -54}, {"w": "aa", "b": "bb"})  # one loss off by one ulp
    d = _run(tmp_path / "d", {0: 1.5, 1: 0.25}, {"w": "aa", "b": "bc"})  # one tensor differs
    da, db, dc, dd = map(run_digest, (a, b, c, d))
    assert da == db and set(da) == {"losses", "params", "run"} and len(da["run"]) == 64
    assert dc["run"] != da["run"] and dc["params"] == da["params"] and dc["losses"] != da["losses"]
    assert dd["run"] != da["run"] and dd["losses"] == da["losses"]
    # a digest is equal exactly when verify says identical
    assert verify(a, b)[0] and not verify(a, c)[0] and not verify(a, d)[0]


def test_run_digest_merges_stage_params_files(tmp_path):
    a = _run(tmp_path / "a", {0: 1.0}, {"s0.w": "x", "s1.w": "y"})
    b = tmp_path / "b"
    b.mkdir()
    write_losses(b / "losses.csv", {0: 1.0})
    (b / "params-stage0.json").write_text(json.dumps({"s0.w": "x"}))
    (b / "params-stage1.json").write_text(json.dumps({"s1.w": "y"}))
    assert run_digest(a) == run_digest(b)
    with pytest.raises((OSError, ResultsError)):
        run_digest(tmp_path / "missing")


def test_hash_table_summary_and_figure(tmp_path):
    ref = _run(tmp_path / "ref", {0: 1.0, 1: 2.0}, {"w": "aa"})
    csp1 = _run(tmp_path / "csp1", {0: 1.0, 1: 2.0}, {"w": "aa"})
    csp2 = _run(tmp_path / "csp2", {0: 1.0, 1: 2.0}, {"w": "aa"})
    asp = _run(tmp_path / "asp", {0: 1.0, 1: 2.5}, {"w": "ab"})
    rows = [{"run": "csp 1 stage", "policy": "csp", "stages": 1, "dir": csp1},
            {"run": "csp 2 stages", "policy": "csp", "stages": 2, "dir": str(csp2)},
            {"run": "asp 2 stages", "policy": "asp", "stages": 2, "dir": asp}]
    table = hash_table(rows, reference=ref)
    assert [r["run"] for r in table] == ["reference", "csp 1 stage", "csp 2 stages", "asp 2 stages"]
    assert [r["equal"] for r in table] == [True, True, True, False]
    assert [r["verdict"] for r in table][-1] == "DIFFERS"
    assert "dir" not in table[1] and table[1]["stages"] == 1 and len(table[1]["hash"]) == 12
    assert table[0]["hash"] == table[1]["hash"] == table[2]["hash"] != table[3]["hash"]
    assert table[0]["schedule"] == "-"  # no trace.json
    s = summary(table)
    assert s == {"runs": 3, "reproducible_runs": 2, "all_reproducible": True, "hazard_runs": 1,
                 "hazard_differs": True, "distinct_hashes": 2}
    line = json.loads(digests_json(table, subnets=2))
    assert line["all_reproducible"] and line["hazard_differs"] and line["subnets"] == 2
    assert line["hashes"]["asp 2 stages"] == table[3]["hash"]
    fig = hash_table_figure(table, title="hashes")
    assert isinstance(fig, go.Figure) and fig.data[0].type == "table"
    assert "equal" not in [h.replace("<b>", "").replace("</b>", "") for h in fig.data[0].header.values]
    assert fig.data[0].cells.fill.color[0][-1] != "white"  # the differing row is highlighted
    # without a reference: hashes only
    plain = hash_table(rows[:1])
    assert "equal" not in plain[0] and plain[0]["hash"] == table[0]["hash"]
    with pytest.raises(KeyError, match="dir"):
        hash_table([{"run": "x"}])
    # two tables against two references combine into one summary
    both = table + hash_table(rows[:1], reference=ref, reference_name="reference (other)")
    assert both[4]["run"] == "reference (other)" and summary(both)["runs"] == 4
    curves = loss_curves({"reference": ref, "asp": asp})
    assert [t.name for t in curves.data] == ["reference", "asp"] and list(curves.data[1].y) == [1.0, 2.5]
    assert curves.layout.xaxis.title.text and curves.layout.yaxis.title.text


def test_schedule_digest_sees_the_order_of_tasks_only(tmp_path):
    from naspipe.sched.trace import Trace, TraceEvent

    def write(name, events):
        (tmp_path / name).mkdir()
        Trace(2, [TraceEvent(*e) for e in events], {}).save(tmp_path / name / "trace.json")
        return tmp_path / name

    a = write("a", [(0, "F", 0, 0.0, 1.0), (1, "F", 0, 1.0, 2.0), (0, "F", 1, 1.0, 2.0)])
    b = write("b", [(0, "F", 0, 0.0, 1.2), (1, "F", 0, 1.5, 2.5), (0, "F", 1, 1.2, 2.0)])  # same order, other times
    c = write("c", [(0, "F", 0, 0.0, 0.9), (1, "F", 0, 0.9, 2.0), (0, "F", 1, 1.0, 2.0)])  # another order
    assert schedule_digest(a) == schedule_digest(b) != schedule_digest(c)
    assert schedule_digest(tmp_path) is None


def test_conflict_dense_keeps_fixed_blocks_and_cuts_candidates():
    sp = preset("digits-cnn")
    cd = conflict_dense(sp, 1)
    assert cd.name == "digits-cnn-k1" and cd.num_blocks == sp.num_blocks
    for a, b in zip(sp.blocks, cd.blocks, strict=True):
        assert len(b.candidates) == (len(a.candidates) if a.fixed else 1)
    assert conflict_dense("digits-cnn", 2).blocks[1].candidates == sp.blocks[1].candidates[:2]
    with pytest.raises(ValueError):
        conflict_dense(sp, 0)


def test_write_reference_matches_a_direct_reference_run(tmp_path):
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runfolder.results import param_hashes

    sp = preset("digits-cnn")
    subs = [UniformStream(sp, 1, 3)[j] for j in range(3)]
    cfg = SimpleNamespace(space=sp, seed=1, shared=parse_shared("frozen"), optimizer="sgd", lr=None,
                          stream=lambda: ReplayStream(sp, subs))
    d = write_reference(cfg, tmp_path / "ref")
    ref = train_reference(sp, ReplayStream(sp, subs), 1, parse_shared("frozen"))
    direct = _run(tmp_path / "direct", ref.losses, param_hashes(ref.model.global_named_parameters()))
    assert run_digest(d) == run_digest(direct)


def test_train_job_runs_in_the_background_and_reraises(monkeypatch, tmp_path):
    import naspipe.runtime as rt

    gate = threading.Event()

    def fake_train(cfg):
        gate.wait(5)
        if cfg.out.name == "bad":
            raise RuntimeError("stage 1 failed")
        return f"result of {cfg.out.name}"

    monkeypatch.setattr(rt, "train", fake_train)
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "status.json").write_text('{"complete": true}')  # left by an earlier run
    job = TrainJob(SimpleNamespace(out=tmp_path / "ok", overwrite=True)).start()
    assert not (tmp_path / "ok" / "status.json").exists()
    assert job.is_alive() and job.events == tmp_path / "ok" / "events.jsonl"
    with pytest.raises(TimeoutError):
        job.wait(0.05)
    gate.set()
    assert job.wait(5) == "result of ok" and not job.is_alive()
    bad = TrainJob(SimpleNamespace(out=tmp_path / "bad")).start()
    with pytest.raises(RuntimeError, match="stage 1 failed"):
        bad.wait(5)


def test_start_reference_runs_write_reference_in_the_background(monkeypatch, tmp_path):
    import naspipe.experiments.jobs as jobs

    monkeypatch.setattr(jobs, "write_reference", lambda cfg, out: Path(out))
    job = start_reference(SimpleNamespace(), tmp_path / "ref")
    assert isinstance(job, Job) and job.wait(5) == tmp_path / "ref"


# ---- figures: simulated against measured on one time axis (naspipe.experiments.figures, naspipe.viz.svg) ----------
def test_simulated_twin_rescales_the_cost_model_and_svg_stacks_panels():
    import xml.etree.ElementTree as ET

    from naspipe.experiments.figures import scaled_space, simulated_twin
    from naspipe.sched.trace import Trace, TraceEvent
    from naspipe.sim import simulate
    from naspipe.spaces.partition import partition
    from naspipe.viz.svg import dag_svg, gantt_svg

    sp = preset("digits-cnn")
    part = partition(sp, 2)
    stream = UniformStream(sp, 0, 6)
    sim = simulate(RunSpec.of(sp, part, stream, "csp")).trace
    # a "measured" trace whose forwards take 3x and backwards 2x the cost model
    fake = Trace(2, [TraceEvent(e.stage, e.kind, e.subnet, 0.0, (e.end - e.start) * (3 if e.kind == "F" else 2))
                     for e in sim.events], {})
    twin = simulated_twin(sp, part, stream, fake)
    assert twin.meta["scale_f"] == pytest.approx(3) and twin.meta["scale_b"] == pytest.approx(2)
    dur = lambda t, k: sum(e.end - e.start for e in t.events if e.kind == k)  # noqa: E731
    assert dur(twin, "F") == pytest.approx(3 * dur(sim, "F")) and dur(twin, "B") == pytest.approx(2 * dur(sim, "B"))
    assert scaled_space(sp, 1, 1).blocks == sp.blocks
    svg = gantt_svg({"measured": fake, "simulated": twin}, "m vs s")
    root = ET.fromstring(svg)
    texts = [el.text for el in root.iter() if el.tag.endswith("text")]
    assert "measured" in texts and "simulated" in texts and texts.count("stage 1") == 2
    assert "pipeline stage" in texts and any(t and t.startswith("time (") for t in texts)
    rects = [el for el in root.iter() if el.tag.endswith("rect")]
    assert len(rects) >= len(fake.events) + len(twin.events)
    single = ET.fromstring(gantt_svg(sim, "one"))
    assert [el.text for el in single.iter() if el.tag.endswith("text")].count("stage 0") == 1
    from naspipe.viz.dag import dag_from_trace

    g = dag_from_trace(sim, sp, part, [stream[j] for j in range(6)])
    dtexts = [el.text for el in ET.fromstring(dag_svg(g, "d")).iter() if el.tag.endswith("text")]
    assert {"data edge", "causal edge (write -> read)", "critical path"} <= set(dtexts)
