"""``naspipe rank``: rank statistics with intervals against a stand-alone truth, and the seed noise floors."""

from __future__ import annotations

import json
import shutil
from itertools import combinations
from math import sqrt
from pathlib import Path

import pytest

import naspipe
from naspipe.cli import main
from naspipe.ranking.stats import (
    MIN_ARCHS,
    Estimate,
    TooFewArchitectures,
    agreement,
    difference,
    kendall,
    pairwise_tau,
    regret,
    seed_floor,
    spearman,
    top_overlap,
    verdict,
)
from naspipe.truth.records import ENTRIES, SETTINGS, SPACE_JSON, TABLE, entry_name, load

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")
# 200 bootstrap resamples, not 1000: the tests check an interval's shape and what holds whatever its width, never
# its digits (as tests/benchmarks/test_sampler_quality.py does)
FEW = 200


def _tau_b_by_pairs(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b counted pair by pair: (concordant - discordant) / sqrt((pairs - tied in x) * (pairs - tied
    in y)); a pair tied on either side counts neither way."""
    conc = disc = tx = ty = pairs = 0
    for i, j in combinations(range(len(x)), 2):
        pairs += 1
        dx, dy = x[i] - x[j], y[i] - y[j]
        tx, ty = tx + (dx == 0), ty + (dy == 0)
        conc, disc = conc + (dx * dy > 0), disc + (dx * dy < 0)
    return (conc - disc) / sqrt((pairs - tx) * (pairs - ty))


# ---- statistics on hand-made cases ------------------------------------------------------------------
def test_tau_and_rho_agree_with_hand_counts_with_and_without_ties():
    x, y = [1, 2, 3, 4, 5], [1, 3, 2, 5, 4]
    # 10 pairs, 2 discordant ((2,3) and (4,5)): tau = (8 - 2) / 10; rho = 1 - 6 * (0+1+1+1+1) / (5 * 24)
    assert kendall(x, y) == pytest.approx(0.6)
    assert spearman(x, y) == pytest.approx(0.8)
    # ties: of 10 pairs, (1,2) is tied in x and (2,3) in y; 7 concordant, 1 discordant ((0,1)):
    # tau-b = (7 - 1) / sqrt((10 - 1) * (10 - 1)) = 2/3 (tau-a would be 0.6, tau-c 0.75)
    assert kendall(x, x[::-1]) == pytest.approx(-1.0) and kendall(x, [3] * 5) == 0.0
    u, v = [1, 2, 2, 3, 4], [2, 1, 3, 3, 4]
    assert kendall(u, v) == pytest.approx(2 / 3) == pytest.approx(_tau_b_by_pairs(u, v))
    # rho with ties: Pearson's r of the mid-ranks (1, 2.5, 2.5, 4, 5) and (2, 1, 3.5, 3.5, 5): 7.25 / 9.5
    assert spearman(u, v) == pytest.approx(29 / 38)


def test_top_overlap_and_regret_on_a_hand_made_case():
    truth = [0.90, 0.95, 0.80, 0.70, 0.99, 0.60, 0.85, 0.75, 0.65, 0.50, 0.55, 0.97]  # top 10% of 12: 2
    est = [0.9, 0.1, 0.2, 0.3, 0.8, 0.4, 0.5, 0.6, 0.7, 0.0, 0.05, 0.15]  # picks index 0 (truth 0.90)
    assert top_overlap(truth, est) == 0.5  # top-2 of truth {4, 11}; of est {0, 4}
    assert regret(truth, est) == pytest.approx(0.99 - 0.90)
    tie = [0.9, 0.9] + [0.0] * 10  # the same estimated accuracy: the lower loss is the pick (as in search)
    assert regret(truth, tie, est_loss=[0.2, 0.1] + [1.0] * 10) == pytest.approx(0.99 - 0.95)


def test_agreement_intervals_bracket_the_value_and_are_seeded():
    truth = [i / 40 for i in range(40)]
    est = [t + (0.3 if i % 3 == 0 else -0.2) for i, t in enumerate(truth)]
    a, b = agreement(truth, est, resamples=FEW), agreement(truth, est, resamples=FEW)
    assert a == b
    for e in (a.kendall, a.spearman, a.top, a.regret):
        assert e.low <= e.value <= e.high
    assert a.kendall.value == pytest.approx(_tau_b_by_pairs(truth, est))
    assert a.kendall.high - a.kendall.low > 0.01  # an interval, not a point
    assert agreement(truth, est, resamples=50).kendall != a.kendall  # the intervals take the resamples given


def test_pairwise_floor_and_verdict():
    rest = [7, 8, 9, 10]
    cols = [[1, 2, 3, 4, 5, 6, *rest], [1, 2, 3, 4, 6, 5, *rest], [2, 1, 3, 4, 5, 6, *rest]]
    f = pairwise_tau(cols, resamples=FEW)
    assert f is not None
    expect = (kendall(cols[0], cols[1]) + kendall(cols[0], cols[2]) + kendall(cols[1], cols[2])) / 3
    assert f.value == pytest.approx(expect)
    assert pairwise_tau(cols[:1]) is None
    assert verdict(Estimate(0.2, 0.15, 0.25), band=0.1) == "difference"
    assert verdict(Estimate(0.2, 0.05, 0.25), band=0.1) == "within seed noise"
    assert verdict(Estimate(-0.2, -0.3, -0.12), band=0.1) == "difference"
    assert verdict(Estimate(0.02, 0.01, 0.03), band=0.0) == "difference"


# ---- the command ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> Path:
    """A small truth of the digits-truth space: 40 architectures x 2 seeds, 3 steps each."""
    d = tmp_path_factory.mktemp("truth") / "t"
    assert main(["truth", "--space", SPACE, "--sample", "40", "--seeds", "2", "--steps", "3", "--workers", "1",
                 "--no-progress", "--out", str(d)]) == 0
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("rank")
    common = ["--space", SPACE, "--subnets", "40", "--optimizer", "momentum", "--shared-layers", "serial"]
    out = {}
    for name, extra in (("ref", []), ("ref1", ["--seed", "1"])):
        out[name] = d / name
        assert main(["reference", *common, *extra, "--no-progress", "--out", str(out[name])]) == 0
    out["csp"] = d / "csp"
    assert main(["train", *common, "--stages", "2", "--policy", "csp", "--no-progress", "--out",
                 str(out["csp"])]) == 0
    return out


def _rank(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["rank", "--resamples", str(FEW), *map(str, args)])
    c = capsys.readouterr()
    return code, c.out, c.err


def test_rank_of_a_csp_run_and_of_its_reference_print_the_same_numbers(runs, truth, capsys):
    code, ref, _ = _rank(capsys, runs["ref"], "--truth", truth)
    assert code == 0
    code, csp, _ = _rank(capsys, runs["csp"], "--truth", truth)
    assert code == 0
    strip = [line for line in ref.splitlines() if not line.startswith("run:")]
    assert strip == [line for line in csp.splitlines() if not line.startswith("run:")]
    for word in ("Kendall tau", "Spearman rho", "top-10% overlap", "regret of the pick", "(a) truth seed vs seed"):
        assert word in ref
    assert len(ref.splitlines()) <= 24  # one screen


def test_rank_json_against_and_seeds(runs, truth, capsys):
    code, out, _ = _rank(capsys, runs["ref"], "--truth", truth, "--against", runs["csp"], "--seeds",
                         runs["ref"], runs["ref1"], "--json")
    assert code == 0
    d = json.loads(out)
    assert d["truth"]["architectures"] == 40
    assert d["against"]["run_to_run_tau"]["value"] == pytest.approx(1.0)  # csp == its reference, bit for bit
    assert d["against"]["tau_difference"]["value"] == 0.0 and d["against"]["same_pick"]
    # equal runs: a zero difference never clears the seed band
    assert d["against"]["verdict"] == "within seed noise"
    f = d["floors"]
    assert f["supernet_seed_vs_seed"] is not None and len(f["supernet_seed_taus"]) == 2
    assert f["seed_band"] == pytest.approx(abs(f["supernet_seed_taus"][0] - f["supernet_seed_taus"][1]))
    assert -1 <= f["truth_seed_vs_seed"]["low"] <= f["truth_seed_vs_seed"]["value"] <= 1
    vs = d["vs_truth"]
    for k in ("kendall_tau", "spearman_rho", "top10_overlap", "regret"):
        assert vs[k]["low"] <= vs[k]["value"] <= vs[k]["high"], k
    code, text, _ = _rank(capsys, runs["ref"], "--truth", truth, "--against", runs["ref1"])
    assert code == 0 and "tau difference" in text and "(no seed band: pass --seeds)" in text


def test_a_truth_of_another_space_is_refused(truth, tmp_path, capsys):
    run = tmp_path / "mlp"
    assert main(["reference", "--space", str(ROOT / "data" / "spaces" / "small-mlp.json"), "--subnets", "4",
                 "--no-progress", "--out", str(run)]) == 0
    code, _, err = _rank(capsys, run, "--truth", truth)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "trained space 'small-mlp'" in err and "the truth is of space 'digits-truth'" in err


def test_a_truth_with_missing_entries_is_refused(runs, truth, tmp_path, capsys):
    partial = tmp_path / "partial"
    shutil.copytree(truth, partial)
    (partial / TABLE).unlink()
    sorted((partial / ENTRIES).glob("*.json"))[5].unlink()
    code, _, err = _rank(capsys, runs["ref"], "--truth", partial)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "1 of 80 entries are missing" in err
    broken = tmp_path / "broken"
    broken.mkdir()
    t = json.loads((truth / TABLE).read_text())
    t["entries"][3]["accuracy"] = t["entries"][3]["accuracy"][:-1]
    (broken / TABLE).write_text(json.dumps(t))
    code, _, err = _rank(capsys, runs["ref"], "--truth", broken)
    assert code == 2 and "no truth-settings.json" in err  # a table alone is not a truth
    shutil.rmtree(broken)
    shutil.copytree(truth, broken)
    (broken / TABLE).write_text(json.dumps(t))
    code, _, err = _rank(capsys, runs["ref"], "--truth", broken)
    assert code == 2 and "disagrees with the truth's entries" in err and "accuracy" in err
    code, _, err = _rank(capsys, runs["ref"], "--truth", tmp_path / "nowhere")
    assert code == 2 and "no such truth folder" in err


# ---- no silent wrong answers: a refusal in one line, not a traceback -----------------------------------
@pytest.fixture(scope="module")
def odd_runs(tmp_path_factory) -> dict[str, Path]:
    """Runs that must not be ranked as they are: another optimizer (not a seed run), a copy of the truth's space
    with another batch size under the same name, and a diverged run (lr 1e30: NaN losses)."""
    d = tmp_path_factory.mktemp("odd")
    b32 = json.loads(Path(SPACE).read_text())
    b32["batch_size"] = 32
    (d / "b32.json").write_text(json.dumps(b32))
    common = ["--subnets", "40", "--shared-layers", "serial", "--no-progress"]
    out = {}
    for name, extra in (("sgd", ["--space", SPACE, "--seed", "1", "--optimizer", "sgd"]),
                        ("b32", ["--space", str(d / "b32.json"), "--optimizer", "momentum"]),
                        ("nan", ["--space", SPACE, "--optimizer", "momentum", "--lr", "1e30"])):
        out[name] = d / name
        assert main(["reference", *common, *extra, "--out", str(out[name])]) == 0
    return out


def _refused(capsys, *args: str) -> str:
    code, out, err = _rank(capsys, *args)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, (code, out, err)
    return err


def test_seed_runs_must_differ_in_the_seed_alone(runs, odd_runs, truth, capsys):
    """--seeds of the same run twice, or of runs of another optimizer, would give a floor of 1.00 and a band of 0.00
    (then "difference"): they are refused, naming the field."""
    err = _refused(capsys, runs["ref"], "--truth", truth, "--seeds", runs["ref"], runs["ref"], "--against",
                   runs["ref1"])
    assert "same run (both of seed 0)" in err
    err = _refused(capsys, runs["ref"], "--truth", truth, "--seeds", runs["ref"], runs["csp"])  # csp == ref, seed 0
    assert "same run" in err
    err = _refused(capsys, runs["ref"], "--truth", truth, "--seeds", runs["ref"], odd_runs["sgd"])
    assert "differ in more than the seed" in err and "optimizer 'momentum' vs 'sgd'" in err and "lr" in err
    assert "two or more runs" in _refused(capsys, runs["ref"], "--truth", truth, "--seeds", runs["ref1"])
    with pytest.raises(ValueError, match="not one path"):
        naspipe.rank(runs["ref"], truth, seeds=str(runs["ref"]))  # a string is not a list of its characters


def test_a_run_of_another_space_of_the_same_name_is_refused(odd_runs, truth, capsys):
    """A copy of the truth's space with batch 32, under its name, is not the truth's space: the digest the run
    records is compared with the truth's (the truth's space.json does not stand in for the run's)."""
    err = _refused(capsys, odd_runs["b32"], "--truth", truth)
    assert "the same name, another definition" in err


def test_a_diverged_run_and_all_tied_scores_are_refused(odd_runs, runs, truth, capsys, monkeypatch):
    """NaN losses, or one score for every architecture, rank nothing: refused, not reported as tau 0.00 [0.00,
    0.00], regret 0 and the first architecture as the pick."""
    err = _refused(capsys, odd_runs["nan"], "--truth", truth)
    assert "NaN or infinite for 40 of 40 architectures" in err and "diverged" in err
    import naspipe.search.run as search_run

    monkeypatch.setattr(search_run, "make_evaluator", lambda model, batches: lambda a: {"accuracy": 0.5, "loss": 1.0})
    assert "same accuracy (0.5000); it ranks nothing" in _refused(capsys, runs["ref"], "--truth", truth)
    # a tie at the top is said, not hidden: the pick is the first of the tied in the truth's order
    monkeypatch.setattr(search_run, "make_evaluator",
                        lambda model, batches: lambda a: {"accuracy": 0.9 if sum(a) > 12 else sum(a) / 20, "loss": 1.0})
    code, out, _ = _rank(capsys, runs["ref"], "--truth", truth)
    assert code == 0 and "tied with" in out and "the first in the truth's order" in out


def _edit_arch(src: Path, dst: Path, new: object) -> None:
    """A copy of truth ``src`` whose first architecture is ``new`` everywhere (settings, table, entry files)."""
    shutil.copytree(src, dst)
    settings, table = json.loads((dst / SETTINGS).read_text()), json.loads((dst / TABLE).read_text())
    old = settings["archs"][0]
    settings["archs"][0] = table["entries"][0]["arch"] = new
    for s in settings["seeds"]:
        rec = json.loads((dst / ENTRIES / entry_name(old, s)).read_text())
        rec["arch"] = new
        (dst / ENTRIES / entry_name(new, s)).write_text(json.dumps(rec))  # type: ignore[arg-type]
    (dst / SETTINGS).write_text(json.dumps(settings))
    (dst / TABLE).write_text(json.dumps(table))


@pytest.mark.parametrize("arch, msg", [
    ([0, -1, 3, 5, 0], "must be a whole number >= 0, got -1"),  # (not candidate 5 by negative indexing)
    ([1, 2, 3, 5, 0], "candidate 1 of block 'stem' (a fixed block"),
    ([0, 9, 9, 9, 0], "candidate 9 of block 'cell0' (candidates 0..5)"),
    ([0, 0.5, 3, 5, 0], "must be a whole number >= 0, got 0.5"),
])
def test_architectures_outside_the_space_are_refused(runs, truth, tmp_path, capsys, arch, msg):
    """The truth's architectures are whole numbers within each block's candidates."""
    _edit_arch(truth, tmp_path / "t", arch)
    assert msg in _refused(capsys, runs["ref"], "--truth", tmp_path / "t")


def test_the_truths_own_files_are_blamed_not_the_run(runs, truth, tmp_path, capsys):
    """An empty list of architectures, a swapped or corrupt space.json, a path too long."""
    t = tmp_path / "t"
    shutil.copytree(truth, t)
    settings = json.loads((t / SETTINGS).read_text())
    (t / SETTINGS).write_text(json.dumps({**settings, "archs": []}))
    assert "archs must be a non-empty list" in _refused(capsys, runs["ref"], "--truth", t)
    (t / SETTINGS).write_text(json.dumps(settings))
    (t / SPACE_JSON).write_text((ROOT / "data" / "spaces" / "small-mlp.json").read_text())
    err = _refused(capsys, runs["ref"], "--truth", t)
    assert "the truth's" in err and "is space 'small-mlp'" in err and "not the space 'digits-truth'" in err
    (t / SPACE_JSON).write_text('{"name": "digits-truth", "blocks": [')
    err = _refused(capsys, runs["ref"], "--truth", t)
    assert "is not a search space" in err and "--space given" not in err
    long = "x" * 300
    assert "File name too long" in _refused(capsys, runs["ref"], "--truth", tmp_path / long)
    assert "File name too long" in _refused(capsys, tmp_path / long, "--truth", truth)


def test_too_few_architectures_are_said_not_computed(runs, truth, tmp_path, capsys):
    """Fewer than MIN_ARCHS architectures are refused: one would give tau 0.00 [0.00, 0.00], four a zero-width
    interval and "difference"."""
    with pytest.raises(TooFewArchitectures, match="too few architectures"):
        difference([0, 1, 2, 3], [0, 1, 2, 3], [3, 2, 1, 0])
    with pytest.raises(TooFewArchitectures):
        agreement([], [])
    small = tmp_path / "small"
    assert main(["truth", "--space", SPACE, "--sample", str(MIN_ARCHS - 1), "--seeds", "1", "--steps", "1",
                 "--workers", "1", "--no-progress", "--out", str(small)]) == 0
    assert "n/a (too few architectures" in capsys.readouterr().out
    assert "too few to rank" in _refused(capsys, runs["ref"], "--truth", small)


def test_json_has_the_numbers_behind_every_statistic_and_no_nan(runs, truth, capsys):
    """--json carries, per architecture, the truth's mean and the runs' accuracy and loss, so anyone
    can recompute the statistics, and never a bare NaN (an interval's non-finite bound is null)."""
    code, out, _ = _rank(capsys, runs["ref"], "--truth", truth, "--against", runs["ref1"], "--json")
    assert code == 0
    d = json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    rows = d["architectures"]
    assert len(rows) == 40 and {"arch", "name", "truth_accuracy", "run_accuracy", "run_loss",
                                "against_accuracy"} <= set(rows[0])
    t, r = [x["truth_accuracy"] for x in rows], [x["run_accuracy"] for x in rows]
    assert d["vs_truth"]["kendall_tau"]["value"] == pytest.approx(kendall(t, r))
    assert regret(t, r, [x["run_loss"] for x in rows]) == pytest.approx(d["vs_truth"]["regret"]["value"])
    assert Estimate(float("nan"), 0.1, float("inf")).to_dict() == {"value": None, "low": 0.1, "high": None}
    assert Estimate(float("nan"), 0.1, 0.2).text() == "n/a [0.10, 0.20]"
    # a column that ties every architecture ranks nothing: its rank correlations are n/a, not a confident 0
    tied = agreement([0.5] * 10, list(range(10)), resamples=FEW)
    assert (tied.kendall.text(), tied.spearman.text(), tied.to_dict()["kendall_tau"]["value"]) == ("n/a", "n/a", None)
    assert pairwise_tau([[0.5] * 10, list(range(10))], resamples=FEW).text() == "n/a"
    diff = difference(list(range(10)), [0.1] * 10, list(range(10)), resamples=FEW)
    assert (diff.text(), verdict(diff, 0.1), verdict(Estimate(0.5, 0.4, 0.6), float("nan"))) == ("n/a",) * 3
    from naspipe.viz.trust import tau_figure

    fig = tau_figure({"run": Estimate(0.5, 0.4, 0.6), "tied": tied.kendall}, {"(a)": tied.kendall.to_dict()})
    assert list(fig.data[0].x) == ["run"] and [a.text for a in fig.layout.annotations] == ["n/a: ranks nothing"]


def test_the_python_helpers_refuse_in_one_line(runs, truth):
    """Notebook 09's helpers from Python."""
    from naspipe.viz.trust import rank_scatter, tau_figure

    report = naspipe.rank(runs["ref"], load(truth), resamples=FEW)  # a loaded Truth finds its folder's space.json
    assert report.vs_truth.kendall.low <= report.vs_truth.kendall.value
    for bad in (True, 1.5, "2", 0):
        with pytest.raises(ValueError, match="heldout must be a whole number"):
            naspipe.rank(runs["ref"], truth, heldout=bad)
        with pytest.raises(ValueError, match="resamples must be a whole number"):
            naspipe.rank(runs["ref"], truth, resamples=bad)
    tr = load(truth)
    acc = [tr.mean_accuracy(a) for a in tr.archs]
    names = [tr.names[a] for a in tr.archs]
    with pytest.raises(ValueError, match="one stand-alone accuracy"):
        rank_scatter(acc, report.run.accuracy[:-1], names)
    for pick in (99, -1):
        with pytest.raises(ValueError, match="pick must be the index"):
            rank_scatter(acc, report.run.accuracy, names, pick=pick)
    fig = tau_figure({"run": report.vs_truth.kendall}, {"(a)": report.floor_truth, "(b)": None})
    assert fig.data[0].y[0] == report.vs_truth.kendall.value
    with pytest.raises(ValueError, match="expected an Estimate"):
        tau_figure({"run": 0.5}, {})
    with pytest.raises(ValueError, match="taus: expected a mapping of label -> Estimate, got list"):
        tau_figure([0.5], {})
    assert seed_floor(truth, resamples=FEW) == seed_floor(tr, resamples=FEW)  # a folder stands for its truth
    with pytest.raises(ValueError, match="seed_floor takes a truth"):
        seed_floor(3)
    with pytest.raises(ValueError, match="a truth folder is a path, got NoneType"):
        load(None)
    with pytest.raises(ValueError, match="is a file, not a truth folder"):
        load(Path(truth) / TABLE)
    for bad in (None, (x for x in acc)):
        with pytest.raises(ValueError, match="the truth must be a list of scores, one per architecture"):
            agreement(bad, acc)
    with pytest.raises(ValueError, match="resamples must be a whole number >= 1, got 0"):
        agreement(acc, acc, resamples=0)


def test_a_run_without_run_json_is_not_vouched_for_by_the_truths_space(odd_runs, runs, truth, tmp_path, capsys):
    """A run folder without run.json (older, or copied by hand) records only its space's name: the truth's
    space.json stood in for it, so a run of another space of that name (batch 32) was ranked. It is refused, and
    ranked once its space is given (--space, checked against the truth's)."""
    for name, src in (("b32", odd_runs["b32"]), ("ref", runs["ref"])):
        shutil.copytree(src, tmp_path / name)
        (tmp_path / name / "run.json").unlink()
    err = _refused(capsys, tmp_path / "b32", "--truth", truth)
    assert "records no digest of its space 'digits-truth' (no run.json" in err and "--space" in err
    err = _refused(capsys, tmp_path / "b32", "--truth", truth, "--space", odd_runs["b32"].parent / "b32.json")
    assert "differs from the truth's space 'digits-truth'" in err
    assert "records no digest" in _refused(capsys, tmp_path / "ref", "--truth", truth)
    code, out, _ = _rank(capsys, tmp_path / "ref", "--truth", truth, "--space", SPACE)
    assert code == 0 and "Kendall tau" in out


def test_a_space_given_that_is_not_the_truths_is_blamed_not_the_run(runs, truth, capsys):
    """--space of another space than the truth's: the message names the given space and the truth's, not the run
    (it said the run trained another space than the one given)."""
    mlp = str(ROOT / "data" / "spaces" / "small-mlp.json")
    err = _refused(capsys, runs["ref"], "--truth", truth, "--space", mlp)
    assert f"the space given, {mlp!r} (space 'small-mlp'" in err
    assert "differs from the truth's space 'digits-truth'" in err


def test_rank_refuses_a_truth_that_is_neither_a_folder_nor_a_truth(runs):
    for bad in (None, 3, ["t"]):
        with pytest.raises(ValueError, match="truth must be a truth folder .a path. or a loaded Truth"):
            naspipe.rank(runs["ref"], bad)  # (None: a TypeError from inside pathlib)


def test_rank_scatter_refuses_values_that_are_not_finite_numbers():
    """A NaN is a point plotly leaves out without a word (and a wrong best line): refused, naming it."""
    from naspipe.viz.trust import rank_scatter

    names = [f"a{i}" for i in range(4)]
    good = [0.1, 0.2, 0.3, 0.4]
    assert len(rank_scatter(good, [0.4, 0.3, 0.2, 0.1], names).data) == 1
    for column in (0, 1):
        for bad in (float("nan"), float("inf"), None, "0.5"):
            cols = [list(good), list(good)]
            cols[column][2] = bad
            with pytest.raises(ValueError, match=r"accuracy of architecture 2 \('a2'\) is .*not a finite number"):
                rank_scatter(cols[0], cols[1], names)


def test_rank_scatter_takes_a_numpy_integer_as_the_pick():
    """``pick=np.int64(1)`` (what an argmax gives) was refused as no index; a bool is still no index."""
    import numpy as np

    from naspipe.viz.trust import rank_scatter

    names = [f"a{i}" for i in range(4)]
    good = [0.1, 0.2, 0.3, 0.4]
    fig = rank_scatter(good, good[::-1], names, pick=np.int64(1))
    assert fig.data[1].x == (0.2,) and "a1" in fig.data[1].name
    assert rank_scatter(good, good, names, pick=np.argmax(good)).data[1].x == (0.4,)
    for bad in (True, np.float64(1.0), np.int64(4)):
        with pytest.raises(ValueError, match="pick must be the index"):
            rank_scatter(good, good, names, pick=bad)


def test_a_truth_of_one_seed_is_said_in_the_singular(runs, truth):
    """"40 architectures x 1 seeds": rank's header counts one seed as one."""
    from dataclasses import replace

    from naspipe.truth.records import Truth

    tr = load(truth)
    one = Truth(replace(tr.settings, seeds=(0,)), {a: v[:1] for a, v in tr.accuracy.items()},
                {a: v[:1] for a, v in tr.loss.items()}, tr.names)
    text = naspipe.rank(runs["ref"], one, space=SPACE, resamples=FEW).text()
    assert "40 architectures x 1 seed, 3 steps" in text and "n/a (one seed)" in text
