"""``naspipe rank``: rank statistics with intervals against a stand-alone truth, and the seed noise floors."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from scipy import stats

from naspipe.cli import main
from naspipe.ranking.stats import (
    Estimate,
    agreement,
    kendall,
    pairwise_tau,
    regret,
    spearman,
    top_overlap,
    verdict,
)
from naspipe.truth.records import ENTRIES, TABLE

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")


@pytest.fixture(autouse=True)
def _fewer_resamples(monkeypatch):  # noqa: ANN001, ANN202
    """200 bootstrap resamples, not 1000: the tests check an interval's shape and what holds whatever its width,
    never its digits (as tests/benchmarks/test_sampler_quality.py does)."""
    monkeypatch.setattr("naspipe.ranking.stats.RESAMPLES", 200)


# ---- statistics on hand-made cases ------------------------------------------------------------------
def test_tau_and_rho_agree_with_hand_counts_and_scipy():
    x, y = [1, 2, 3, 4, 5], [1, 3, 2, 5, 4]
    # 10 pairs, 2 discordant ((2,3) and (4,5)): tau = (8 - 2) / 10; rho = 1 - 6 * (0+1+1+1+1) / (5 * 24)
    assert kendall(x, y) == pytest.approx(0.6) == stats.kendalltau(x, y).statistic
    assert spearman(x, y) == pytest.approx(0.8) == stats.spearmanr(x, y).statistic
    assert kendall(x, x[::-1]) == pytest.approx(-1.0) and kendall(x, [3] * 5) == 0.0


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
    a, b = agreement(truth, est), agreement(truth, est)
    assert a == b
    for e in (a.kendall, a.spearman, a.top, a.regret):
        assert e.low <= e.value <= e.high
    assert a.kendall.value == pytest.approx(stats.kendalltau(truth, est).statistic)
    assert a.kendall.high - a.kendall.low > 0.01  # an interval, not a point


def test_pairwise_floor_and_verdict():
    cols = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 6, 5], [2, 1, 3, 4, 5, 6]]
    f = pairwise_tau(cols)
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
    code = main(["rank", *map(str, args)])
    c = capsys.readouterr()
    return code, c.out, c.err


def test_rank_of_a_csp_run_and_of_its_reference_print_the_same_numbers(runs, truth, capsys):
    t0 = time.perf_counter()
    code, ref, _ = _rank(capsys, runs["ref"], "--truth", truth)
    wall = time.perf_counter() - t0
    assert code == 0 and wall < 60, wall
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
    assert code == 2 and "missing entries" in err
    code, _, err = _rank(capsys, runs["ref"], "--truth", tmp_path / "nowhere")
    assert code == 2 and "no such truth folder" in err
