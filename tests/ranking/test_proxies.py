"""``naspipe rank --proxy``: zero-cost proxies at initialisation, scored with rank's statistics and floors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import naspipe.ranking.proxies as proxies
from naspipe.cli import main
from naspipe.models import input_of, make_batch, target_of
from naspipe.ranking.proxies import ProxyError, initial_model, proxy_scores, rank_proxy, score_archs, truth_space
from naspipe.ranking.stats import kendall
from naspipe.truth.records import load

ROOT = Path(__file__).resolve().parents[2]
DIGITS_TRUTH = ROOT / "data" / "truth" / "digits-truth"
FEW = 200  # bootstrap resamples: the tests check shapes and values, not an interval's digits


def _by_hand(kind: str, space, arch: tuple[int, ...], seed: int) -> float:  # noqa: ANN001
    """The proxy of one architecture computed step by step, on a fresh copy of the truth's initial model."""
    model = copy.deepcopy(initial_model(space, seed))
    batch = make_batch(space, seed, 0)
    if kind == "synflow":
        model = model.double().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.abs())
        x = torch.ones((1, *input_of(space, batch).shape[1:]), dtype=torch.float64)
        out = model(x, arch).sum()
    else:
        out = model.loss(model(input_of(space, batch), arch), target_of(space, batch))
    path = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(out, path, allow_unused=True)
    if kind == "synflow":
        return sum(float((p.detach() * g).abs().sum()) for p, g in zip(path, grads, strict=True) if g is not None)
    return sum(float(g.norm()) for g in grads if g is not None)


@pytest.mark.parametrize("kind", ["synflow", "gradnorm"])
def test_a_proxy_is_its_definition_on_the_truths_initial_weights(seed_runs, kind):
    tr = load(seed_runs["truth"])
    space = truth_space(tr)
    archs = tr.archs[:4]
    threads = torch.get_num_threads()
    got = score_archs(space, archs, kind, seed=1)
    assert torch.get_num_threads() == threads  # (one thread inside, the caller's count restored)
    torch.set_num_threads(1)  # (as a proxy scores: one thread, so the bits do not depend on the core count)
    try:
        by_hand = [_by_hand(kind, space, a, 1) for a in archs]
    finally:
        torch.set_num_threads(threads)
    assert got == pytest.approx(by_hand, rel=1e-9)
    assert got == score_archs(space, archs, kind, seed=1)  # the same bits twice
    assert got != score_archs(space, archs, kind, seed=0)  # the seed's initial weights


def test_synflow_is_blind_to_the_signs_of_the_weights_and_to_the_data(seed_runs, monkeypatch):
    """Synflow linearises (the absolute value of every weight) and reads no data (an input of ones)."""
    tr = load(seed_runs["truth"])
    space, archs = truth_space(tr), tr.archs[:6]
    plain, norms = score_archs(space, archs, "synflow"), score_archs(space, archs, "gradnorm")
    assert all(s > 0 for s in plain)

    def flipped(space, seed):  # noqa: ANN001, ANN202
        model = initial_model(space, seed)
        with torch.no_grad():
            for p in model.parameters():
                p.neg_()
        return model

    monkeypatch.setattr(proxies, "initial_model", flipped)
    assert score_archs(space, archs, "synflow") == plain
    monkeypatch.setattr(proxies, "initial_model", initial_model)
    monkeypatch.setattr("naspipe.models.make_batch", lambda sp, seed, j: make_batch(sp, seed, j + 7))
    assert score_archs(space, archs, "synflow") == plain
    assert score_archs(space, archs, "gradnorm") != norms  # (gradnorm does read the batch)


def test_rank_proxy_reports_rank_statistics_deterministically(seed_runs):
    tr = load(seed_runs["truth"])
    a = rank_proxy(tr, "synflow", resamples=FEW)
    target = [tr.mean_accuracy(x) for x in tr.archs]
    assert a.vs_truth.kendall.value == pytest.approx(kendall(target, proxy_scores(tr, "synflow")))
    for e in (a.vs_truth.kendall, a.vs_truth.spearman, a.vs_truth.top, a.vs_truth.regret):
        assert e.low <= e.value <= e.high
    assert a.floor_truth is not None and a.seed_runs is None
    d = a.to_dict()
    b = rank_proxy(seed_runs["truth"], "synflow", resamples=FEW).to_dict()
    d.pop("wall_s"), b.pop("wall_s")
    assert d == b
    assert d["proxy"]["kind"] == "synflow" and d["proxy"]["seeds"] == [0] and d["run"] is None
    rows = d["architectures"]
    assert len(rows) == 40 and "proxy_score" in rows[0] and "run_accuracy" not in rows[0]
    text = a.text()
    assert "proxy: synflow at initialisation (no training)" in text and "(c) this proxy vs truth" in text
    assert "(a) truth seed vs seed" in text and "not measured (pass --proxy-seeds" in text


def test_proxy_seeds_average_and_give_the_proxys_own_floor(seed_runs):
    tr = load(seed_runs["truth"])
    r = rank_proxy(tr, "gradnorm", seeds=(0, 1), resamples=FEW)
    per = [proxy_scores(tr, "gradnorm", seed=s) for s in (0, 1)]
    assert r.run.accuracy == pytest.approx([(x + y) / 2 for x, y in zip(*per, strict=True)])
    assert r.run.accuracy != per[0] and r.run.accuracy != per[1]
    assert r.seed_runs is not None and r.seed_runs.floor.value == pytest.approx(kendall(*per))
    assert "(b) proxy seed vs seed" in r.text() and "2 seeds" in r.text()
    for bad in ((0, 0), (), "01", (-1,)):
        with pytest.raises(ValueError, match="proxy seed"):
            rank_proxy(tr, "gradnorm", seeds=bad)


def test_a_proxy_that_ranks_nothing_is_refused(seed_runs, monkeypatch):
    tr = load(seed_runs["truth"])
    monkeypatch.setitem(proxies.SCORERS, "synflow", lambda model, seed: lambda arch: 3.0)
    with pytest.raises(ProxyError, match="scores every architecture alike"):
        rank_proxy(tr, "synflow")
    monkeypatch.setitem(proxies.SCORERS, "synflow", lambda model, seed: lambda arch: float("nan")
                        if sum(arch) % 2 else float(sum(arch)))
    with pytest.raises(ProxyError, match=r"NaN or infinite for \d+ of 40"):
        rank_proxy(tr, "synflow")


def _cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main(["rank", "--resamples", str(FEW), *map(str, args)])
    c = capsys.readouterr()
    return code, c.out, c.err


@pytest.mark.parametrize("args, msg", [
    (["{ref}", "--proxy", "synflow"], "with no run: drop RUN"),
    (["--proxy", "snyflow"], "unknown proxy 'snyflow': one of synflow, gradnorm, params"),
    (["--proxy", "gradnorm", "--against", "{ref}"], "drop --against"),
    (["--proxy", "gradnorm", "--seeds", "{ref}", "{ref1}"], "drop --seeds"),
    (["--proxy", "gradnorm", "--ensemble", "{ref1}"], "drop --ensemble"),
    (["--proxy", "gradnorm", "--heldout", "2"], "drop --heldout"),
    (["--proxy-seeds", "1"], "--proxy-seeds goes with --proxy"),
    ([], "give a RUN to rank, or --proxy"),
])
def test_the_command_refuses_in_one_line(seed_runs, capsys, args, msg):
    code, out, err = _cli(capsys, *(a.format(**seed_runs) for a in args), "--truth", seed_runs["truth"])
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and msg in err, (code, out, err)


def test_the_command_prints_the_proxys_row(seed_runs, capsys):
    code, out, _ = _cli(capsys, "--proxy", "gradnorm", "--proxy-seeds", "0", "1", "--truth", seed_runs["truth"],
                        "--json")
    assert code == 0
    d = json.loads(out)
    assert d["proxy"]["seeds"] == [0, 1] and d["proxy"]["seed_vs_seed"] is not None
    assert d["vs_truth"]["kendall_tau"]["value"] == pytest.approx(
        rank_proxy(seed_runs["truth"], "gradnorm", seeds=(0, 1), resamples=FEW).vs_truth.kendall.value)


def test_params_counts_the_parameters_an_architecture_uses(seed_runs):
    """The parameters that get a gradient from the architecture's forward and backward, counted."""
    tr = load(seed_runs["truth"])
    space = truth_space(tr)
    got = score_archs(space, tr.archs, "params")
    for i, a in enumerate(tr.archs[:5]):
        model = initial_model(space, 0)
        batch = make_batch(space, 0, 0)
        model.loss(model(input_of(space, batch), a), target_of(space, batch)).backward()
        assert got[i] == sum(p.numel() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("kind, tau", [("synflow", 0.5690), ("gradnorm", 0.5810)])
def test_the_shipped_digits_truth_row(kind, tau):
    """docs/trust.md's row for no training at all (digits-truth, seed 0): the same tau here."""
    r = rank_proxy(DIGITS_TRUTH, kind, resamples=FEW)
    assert r.vs_truth.kendall.value == pytest.approx(tau, abs=5e-4)
