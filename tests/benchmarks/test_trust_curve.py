"""``benchmarks/trust_curve.py`` (issue 41, item 1): one long reference run per sampler and seed yields every
shorter length, because the streams' prefixes and the reference's training do not depend on the total length; the
powered-length rule; the quick run writes only where it is told and resumes from its scores."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from naspipe.models import heldout_batches
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes
from naspipe.search.run import make_evaluator
from naspipe.sequences.samplers import make_stream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import resolve_space

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "trust_curve.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import trust_curve  # noqa: E402

SPACE = resolve_space(str(ROOT / "data" / "spaces" / "digits-truth.json"))
ARCHS = [(0, a, b, c, 0) for a, b, c in ((1, 3, 1), (0, 0, 0), (4, 4, 5), (2, 5, 3), (5, 1, 0), (3, 2, 4))]


@pytest.mark.parametrize("sampler", ["uniform", "fair", "spread", "spread:uniform"])
def test_the_first_subnets_of_a_long_stream_are_the_short_stream(sampler):
    """What the benchmark checks before it trains, at its own lengths and seeds."""
    for seed in range(3):
        trust_curve.check_prefixes(SPACE, seed, sampler, list(trust_curve.LENGTHS))


def test_a_stream_whose_prefix_depends_on_its_length_is_refused(monkeypatch):
    import naspipe.sequences.samplers as samplers

    real = samplers.make_stream
    monkeypatch.setattr(samplers, "make_stream", lambda space, seed, n, spec: real(space, seed + n, n, spec))
    with pytest.raises(AssertionError, match="first 20 subnets"):
        trust_curve.check_prefixes(SPACE, 0, "uniform", [20, 40])


@pytest.mark.parametrize("sampler", ["uniform", "fair", "spread"])
def test_scoring_at_20_subnets_of_a_40_subnet_run_is_the_20_subnet_run(sampler):
    """Bit for bit: the weights, and the scores of the evaluator ``naspipe rank`` uses; and the hook (scoring a
    copy) leaves the long run as it is without it."""
    shared, batches, seen = parse_shared("serial"), heldout_batches(SPACE), {}

    def snapshot(done, model):
        if done == 20:
            seen["params"] = param_hashes(model.global_named_parameters())
            ev = make_evaluator(copy.deepcopy(model), batches)
            seen["scores"] = [ev(a) for a in ARCHS]

    kw = {"optimizer": "momentum", "lr": 0.05}
    hooked = train_reference(SPACE, make_stream(SPACE, 1, 40, sampler), 1, shared, on_subnet_done=snapshot, **kw)
    short = train_reference(SPACE, make_stream(SPACE, 1, 20, sampler), 1, shared, **kw)
    plain = train_reference(SPACE, make_stream(SPACE, 1, 40, sampler), 1, shared, **kw)
    assert seen["params"] == param_hashes(short.model.global_named_parameters())
    ev = make_evaluator(short.model, batches)
    assert seen["scores"] == [ev(a) for a in ARCHS]
    assert len({s["accuracy"] for s in seen["scores"]}) > 1  # (the scores rank something)
    assert hooked.losses == plain.losses
    assert param_hashes(hooked.model.global_named_parameters()) == param_hashes(plain.model.global_named_parameters())
    assert [hooked.losses[j] for j in range(20)] == [short.losses[j] for j in range(20)]


def test_a_failing_hook_raises_its_own_error():
    class Stop(Exception):
        pass

    def hook(done, model):
        raise Stop(done)

    with pytest.raises(Stop):
        train_reference(SPACE, make_stream(SPACE, 0, 3, "uniform"), 0, parse_shared("serial"), on_subnet_done=hook)


def _rows(values_lows):
    return [{"subnets": 100 * 2 ** k, "supernet_seed_vs_seed": {"value": v, "low": lo, "high": v + 0.05}}
            for k, (v, lo) in enumerate(values_lows)]


def test_the_powered_length_rule():
    # lengths 100, 200, 400, 800 (upper bound: value + 0.05); rising to a plateau: from 200 on no longer length's
    # lower bound lies above a length's upper bound
    assert trust_curve.powered_length(_rows([(0.1, 0.0), (0.42, 0.3), (0.45, 0.35), (0.46, 0.40)])) == 200
    # an early value that falls back clearly below a longer length's does not count
    assert trust_curve.powered_length(_rows([(0.5, 0.4), (0.3, 0.2), (0.45, 0.35), (0.46, 0.40)])) == 400
    # still rising at the end: only the longest qualifies, so the plateau is not shown
    assert trust_curve.powered_length(_rows([(0.1, 0.0), (0.2, 0.1), (0.3, 0.2), (0.5, 0.45)])) is None
    # a dip inside the plateau (spread on digits-truth, 2026-12-07): 800 with overlapping intervals after it
    dip = [(0.49, 0.44, 0.55), (0.52, 0.46, 0.56), (0.64, 0.60, 0.67), (0.62, 0.57, 0.67), (0.67, 0.63, 0.71)]
    rows = [{"subnets": 200 * 2 ** k, "supernet_seed_vs_seed": {"value": v, "low": lo, "high": hi}}
            for k, (v, lo, hi) in enumerate(dip)]
    assert trust_curve.powered_length(rows) == 800
    # one seed (no seed-to-seed tau), or one length: no powered length
    one_seed = [{"subnets": 100, "supernet_seed_vs_seed": None}, {"subnets": 200, "supernet_seed_vs_seed": None}]
    assert trust_curve.powered_length(one_seed) is None
    assert trust_curve.powered_length(_rows([(0.5, 0.4)])) is None


def test_a_collapse_ends_the_lengths_the_rule_reads():
    assert trust_curve.collapsed_scores([0.1] * 6 + [0.2, 0.3, 0.4, 0.5]) and not trust_curve.collapsed_scores(
        [0.1] * 5 + [0.2, 0.3, 0.4, 0.5, 0.6])
    rows = _rows([(0.1, 0.0), (0.42, 0.3), (0.45, 0.40), (0.0, 0.0)])
    for r in rows:
        r["collapsed_seeds"] = [1] if r["subnets"] == 800 else []
    assert trust_curve.powered_length(rows) == 200  # over 100, 200 and 400: 400's lower bound 0.40
    rows[1]["collapsed_seeds"] = [0]
    assert trust_curve.powered_length(rows) is None  # one length before the collapse: nothing to compare


def test_the_quick_run_writes_only_its_out_folder_and_resumes(tmp_path, warm):
    watched = [ROOT / "docs" / "trust.md", trust_curve.FIGURE, ROOT / "benchmarks" / "results" / "trust_curve.json"]
    before = [p.read_bytes() if p.is_file() else None for p in watched]
    first = warm.python(SCRIPT, ["--quick", "--out", str(tmp_path), "--scores", str(tmp_path / "s.json")], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    data = json.loads((tmp_path / "trust_curve_quick.json").read_text())
    c = data["config"]
    assert c["lengths"] == [20, 40] and c["supernet_seeds"] == [0, 1] and c["kernels"] == "portable"
    assert c["stream_prefixes_checked"] and c["samplers"] == ["uniform", "spread"] and c["architectures"] == 24
    for s in data["samplers"].values():
        assert [r["subnets"] for r in s["rows"]] == [20, 40]
        for r in s["rows"]:
            for key in ("kendall_tau", "spearman_rho", "top10_overlap", "regret", "supernet_seed_vs_seed"):
                e = r[key]
                assert e["low"] <= e["value"] <= e["high"], (key, e)
            assert len(r["tau_per_seed"]) == 2
        assert s["powered_length"] in (None, 20)
    assert data["floors"]["truth_seed_vs_seed"]["value"] > 0.4  # (the first 24 architectures: 0.49; all 216: 0.68)
    assert trust_curve.table(data) in first.stdout
    trained = [line for line in first.stdout.splitlines() if line.startswith('{"sampler"')]
    assert len(trained) == 4  # one run per (sampler, seed), not one per length
    # the same settings spelt out (not --quick) resume from the kept scores, and with another --out write no docs
    same = ["--lengths", "20", "40", "--seeds", "2", "--samplers", "uniform", "spread", "--resamples", "200",
            "--archs", "24", "--out", str(tmp_path), "--scores", str(tmp_path / "s.json")]
    again = warm.python(SCRIPT, same, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not [line for line in again.stdout.splitlines() if line.startswith('{"sampler"')]  # resumed: no training
    assert json.loads((tmp_path / "trust_curve.json").read_text())["samplers"] == data["samplers"]
    assert [p.read_bytes() if p.is_file() else None for p in watched] == before


@pytest.mark.parametrize("name", ["trust_curve", "trust_curve_mnist1d"])
def test_the_docs_table_is_the_json_s(name):
    data = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
    begin, end = trust_curve.markers(name)
    assert f"{begin}\n{trust_curve.table(data)}\n{end}" in (ROOT / "docs" / "trust.md").read_text()


def test_each_truth_has_its_own_name_markers_and_figure():
    assert trust_curve.markers("trust_curve") == (trust_curve.BEGIN, trust_curve.END)
    begin, end = trust_curve.markers("trust_curve_mnist1d")
    assert "trust_curve_mnist1d" in begin and begin != trust_curve.BEGIN and end != trust_curve.END
    assert trust_curve.figure_path("trust_curve") == trust_curve.FIGURE
    assert trust_curve.figure_path("trust_curve_mnist1d").name == "trust_curve_mnist1d.html"


def test_the_tables_write_an_estimate_of_a_column_that_ranks_nothing_as_n_a():
    """An estimate whose bounds are all null (a column that ties every architecture) is n/a in the benchmarks'
    tables; it stopped trust.py and ranking_methods.py after the whole run, at the markdown."""
    from _common import estimate_text

    from naspipe.ranking.stats import NOT_RANKED, Estimate

    assert estimate_text(NOT_RANKED.to_dict()) == "n/a"
    assert estimate_text(Estimate(0.5, 0.25, float("nan")).to_dict(), 3) == "0.500 [0.250, n/a]"
    assert (estimate_text(None), estimate_text(None, missing="-")) == ("n/a", "-")
