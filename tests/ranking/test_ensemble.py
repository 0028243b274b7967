"""``naspipe rank RUN --ensemble RUN2 ...``: each architecture scored with the mean over supernets equal but the
seed."""

from __future__ import annotations

import json

import pytest

import naspipe
from naspipe.cli import main
from naspipe.ranking.compare import Scored
from naspipe.ranking.ensemble import ensemble_runs, mean_scored
from naspipe.ranking.stats import kendall
from naspipe.truth.records import load

FEW = 200


def test_the_ensemble_scores_the_mean_of_its_runs(seed_runs):
    tr = load(seed_runs["truth"])
    one = naspipe.rank(seed_runs["ref"], tr, resamples=FEW).run
    two = naspipe.rank(seed_runs["ref1"], tr, resamples=FEW).run
    both = naspipe.rank(seed_runs["ref"], tr, ensemble=[seed_runs["ref1"]], resamples=FEW)
    assert both.run.accuracy == pytest.approx([(a + b) / 2 for a, b in zip(one.accuracy, two.accuracy, strict=True)])
    assert both.run.loss == pytest.approx([(a + b) / 2 for a, b in zip(one.loss, two.loss, strict=True)])
    assert both.run.accuracy not in (one.accuracy, two.accuracy)
    target = [tr.mean_accuracy(a) for a in tr.archs]
    assert both.vs_truth.kendall.value == pytest.approx(kendall(target, both.run.accuracy))
    assert [m.run for m in both.run.members] == [str(seed_runs["ref"]), str(seed_runs["ref1"])]


def test_the_report_says_which_runs_were_averaged(seed_runs, capsys):
    code = main(["rank", str(seed_runs["ref"]), "--truth", str(seed_runs["truth"]), "--ensemble",
                 str(seed_runs["ref1"]), "--resamples", str(FEW)])
    out = capsys.readouterr().out
    assert code == 0 and f"run:   mean of 2 runs equal but the seed: {seed_runs['ref']}, {seed_runs['ref1']}" in out
    code = main(["rank", str(seed_runs["ref"]), "--truth", str(seed_runs["truth"]), "--ensemble",
                 str(seed_runs["ref1"]), "--seeds", str(seed_runs["ref"]), str(seed_runs["ref1"]), "--json",
                 "--resamples", str(FEW)])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["ensemble"] == [str(seed_runs["ref"]), str(seed_runs["ref1"])]
    rows = d["architectures"]
    assert all(r["run_accuracy"] == pytest.approx(sum(r["ensemble_accuracy"]) / 2) for r in rows)
    # the seed runs are each scored alone, not as the ensemble
    assert [r["seeds_accuracy"] for r in rows] == [r["ensemble_accuracy"] for r in rows]
    tr = load(seed_runs["truth"])
    target = [tr.mean_accuracy(a) for a in tr.archs]
    assert d["floors"]["supernet_seed_taus"][0] == pytest.approx(kendall(target, [r["seeds_accuracy"][0]
                                                                                  for r in rows]))
    assert naspipe.rank(seed_runs["ref"], tr, resamples=FEW).to_dict()["ensemble"] == []


@pytest.mark.parametrize("members, msg", [
    (["{sgd}"], "--ensemble {ref} and {sgd} differ in more than the seed: optimizer 'momentum' vs 'sgd'"),
    (["{ref}"], "--ensemble {ref} and {ref} are the same run (both of seed 0)"),
    (["{ref1}", "{ref1}"], "are the same run (both of seed 1)"),
])
def test_runs_that_differ_in_more_than_the_seed_are_refused(seed_runs, capsys, members, msg):
    code = main(["rank", str(seed_runs["ref"]), "--truth", str(seed_runs["truth"]), "--ensemble",
                 *(m.format(**seed_runs) for m in members)])
    c = capsys.readouterr()
    assert code == 2 and not c.out and len(c.err.strip().splitlines()) == 1
    assert msg.format(**seed_runs) in c.err, c.err


def test_the_python_api_refuses_in_one_line(seed_runs):
    with pytest.raises(ValueError, match="not one path"):
        ensemble_runs(str(seed_runs["ref1"]))
    with pytest.raises(ValueError, match=r"ensemble\[0\] must be a run folder"):
        ensemble_runs([None])
    assert ensemble_runs(()) == []
    with pytest.raises(ValueError, match="--ensemble .* are the same run"):
        naspipe.rank(seed_runs["ref"], seed_runs["truth"], ensemble=[seed_runs["ref"]])
    a = Scored("a", [0.1, 0.2], [1.0, 2.0], {})
    with pytest.raises(ValueError, match="two runs or more"):
        mean_scored([a])
    with pytest.raises(ValueError, match="different numbers of architectures"):
        mean_scored([a, Scored("b", [0.1], [1.0], {})])
