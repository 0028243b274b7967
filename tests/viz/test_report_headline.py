"""The report leads with the answer: the verdict against a reference (given or found beside the run), the
numbers, and each stage's idle time split by cause (``naspipe.viz.idle``, checked on a hand-made trace)."""

from __future__ import annotations

import networkx as nx
import pytest

from naspipe.cli import main as cli_main
from naspipe.runfolder.results import write_losses, write_params
from naspipe.sched.tasks import BACKWARD as B
from naspipe.sched.tasks import FORWARD as F
from naspipe.sched.tasks import Task
from naspipe.sched.trace import Trace
from naspipe.viz.idle import idle_breakdown
from naspipe.viz.report import write_report


def _three_stage_case(causal_edge: bool = True):
    """Two subnets on three stages; on stage 1, F(1) must wait for subnet 0's write B(0) (same candidate)."""
    tr = Trace(3)
    spans = {(F, 0, 0): (0, 1), (F, 1, 0): (1, 2), (F, 0, 1): (1, 2), (F, 0, 2): (2, 3), (B, 0, 2): (3, 4),
             (B, 0, 1): (4, 5), (F, 1, 1): (5, 6), (B, 0, 0): (5, 6), (F, 1, 2): (6, 7), (B, 1, 2): (7, 8),
             (B, 1, 1): (8, 9), (B, 1, 0): (9, 10)}
    for (k, j, s), (a, b) in spans.items():
        tr.add(s, k, j, float(a), float(b))
    g = nx.DiGraph()
    for j in (0, 1):
        chain = [Task(F, j, 0), Task(F, j, 1), Task(F, j, 2), Task(B, j, 2), Task(B, j, 1), Task(B, j, 0)]
        for u, v in zip(chain, chain[1:], strict=False):
            g.add_edge(u, v, kind="data")
    if causal_edge:
        g.add_edge(Task(B, 0, 1), Task(F, 1, 1), kind="causal")
    return tr, g


def test_idle_time_is_split_by_cause():
    tr, g = _three_stage_case()
    st = idle_breakdown(tr, g)[1]
    assert st.makespan == 10 and st.busy == 4
    # [0,1): nothing had its inputs -> message; [2,4): F(1,1) had its input but waited for B(0,1) -> causal;
    # [6,8): B(1,1) waits for stage 2's gradient -> message; [9,10): drain -> other
    assert st.idle == pytest.approx({"causal": 2.0, "message": 3.0, "memory": 0.0, "other": 1.0})
    assert sum(st.idle.values()) + st.busy == pytest.approx(st.makespan)
    # without the causal edge F(1,1) was free to run in [2,4): the policy's choice, not the rule
    assert idle_breakdown(tr, _three_stage_case(causal_edge=False)[1])[1].idle["causal"] == 0.0


def test_stalls_count_as_memory():
    tr, g = _three_stage_case()
    tr.add(1, "stall", 1, 3.0, 3.5, bytes=10)
    st = idle_breakdown(tr, g)[1]
    assert st.idle["memory"] == pytest.approx(0.5) and st.idle["causal"] == pytest.approx(1.5)
    assert idle_breakdown(tr)[1].idle == pytest.approx({"causal": 0, "message": 0, "memory": 0.5, "other": 5.5})


def _sim_run(root, name="csp"):
    run = root / name
    run.mkdir(parents=True)
    assert cli_main(["simulate", "--space", "naspipe-k12", "--subnets", "20", "--stages", "2",
                     "--trace", str(run / "trace.json")]) == 0
    write_losses(run / "losses.csv", {j: 1.0 + j for j in range(20)})
    write_params(run / "params.json", {"w": "00aa"})
    return run


def test_the_headline_comes_first_with_the_verdict(tmp_path, capsys):
    run = _sim_run(tmp_path)
    text = write_report(run).read_text()
    assert "Not verified" in text  # no reference beside it
    ref = tmp_path / "reference"
    ref.mkdir()
    write_losses(ref / "losses.csv", {j: 1.0 + j for j in range(20)})
    write_params(ref / "params.json", {"w": "00aa"})
    text = write_report(run).read_text()  # found beside the run
    head = text[:text.index("Gantt chart")]
    assert "Identical to the reference" in head and "20 subnets, 1 tensors" in head
    assert "subnets/s" in head and "at the lower bound" in head and "idle: causal dependency" in head
    assert "causal DAG of the first 12 subnets" in text and "time (s)" in text
    assert text.index("<details>") > text.index("causal DAG")  # configuration last, folded
    other = tmp_path / "other"
    other.mkdir()
    write_losses(other / "losses.csv", {j: 1.0 + j for j in range(20)})
    write_params(other / "params.json", {"w": "00ab"})
    assert cli_main(["report", str(run), "--reference", str(other)]) == 0
    text = (run / "report.html").read_text()
    assert "DIFFERS from the reference" in text and "tensor w: hash" in text
    capsys.readouterr()
    assert cli_main(["report", str(run), "--reference", str(tmp_path / "nowhere")]) == 2
    assert "holds no params.json" in capsys.readouterr().err


def test_the_simulated_schedule_takes_the_runs_own_task_times(tmp_path):
    """The report's simulated schedule and its lower bound come from the same durations: the run's own."""
    from naspipe.viz.report import headline, load_run

    run = tmp_path / "measured"
    run.mkdir()
    assert cli_main(["simulate", "--space", "naspipe-k12", "--subnets", "20", "--stages", "3", "--jitter", "0.6",
                     "--policy", "csp", "--trace", str(run / "trace.json")]) == 0
    made = Trace.load(run / "trace.json")
    made.meta["driver"] = "runtime"  # as if measured: the report simulates it again
    made.save(run / "trace.json")
    h = headline(load_run(run))
    # the same policy on the same task times makes the same schedule (not a rescaled cost model's)
    assert h["simulated_utilization"] == pytest.approx(made.utilization(), rel=1e-12)
    assert h["simulated_utilization"] <= h["bound_utilization"] + 1e-12
