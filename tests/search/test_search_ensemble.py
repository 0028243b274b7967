"""``naspipe search RUN --ensemble RUN2 ...`` and ``--ensemble-last N``: each candidate subnet scored with the mean over
supernets equal but the seed, or over a run's last supernets, refused as ``naspipe rank`` refuses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import naspipe.search.run
from naspipe.cli import main
from naspipe.models import build_stage, heldout_batches
from naspipe.models.weights import load_weights
from naspipe.ranking.ensemble import search_ensemble
from naspipe.runtime.checkpoint import position_dir, root_of
from naspipe.search.run import Member, make_evaluator, search_run
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import resolve_space

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")
COMMON = ["--space", SPACE, "--subnets", "12", "--shared-layers", "serial", "--optimizer", "momentum", "--no-progress"]
HELD = 2  # held-out batches: a search of 6 subnets scores each on these
SEARCH = ["--space", SPACE, "--strategy", "random", "--budget", "6", "--heldout", str(HELD), "--json"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    """``a``, ``b``: references of 12 subnets equal but the seed (0, 1); ``lr``: seed 1 at another lr; ``few0``,
    ``few1``: few-shot references (split on cell0 after 6) of seeds 0 and 1; ``last``: 12 subnets on two stages,
    a checkpoint every 4, the 2 newest kept (after 4 and 8)."""
    d = tmp_path_factory.mktemp("search_ensemble")
    few = ["--few-shot", "cell0", "--few-shot-warmup", "6"]
    for name, extra in (("a", []), ("b", ["--seed", "1"]), ("lr", ["--seed", "1", "--lr", "0.03"]),
                        ("few0", few), ("few1", [*few, "--seed", "1"])):
        assert main(["reference", *COMMON, *extra, "--out", str(d / name)]) == 0
    assert main(["train", *COMMON, "--stages", "2", "--checkpoint-every", "4", "--keep-checkpoints", "2",
                 "--out", str(d / "last")]) == 0
    return {name: d / name for name in ("a", "b", "lr", "few0", "few1", "last")}


def _search(capsys, *argv: str) -> dict:  # noqa: ANN001
    assert main(["search", *map(str, argv), *SEARCH]) == 0
    return json.loads(capsys.readouterr().out)


def _scores(d: dict) -> dict[tuple[int, ...], tuple[float, float]]:
    return {tuple(e["indices"]): (e["accuracy"], e["loss"]) for e in d["evaluated"]}


def _best(scores: dict[tuple[int, ...], tuple[float, float]]) -> tuple[int, ...]:
    """The subnet a search picks among these (highest accuracy, then lowest loss; the costs never decide here)."""
    return min(scores, key=lambda s: (-scores[s][0], scores[s][1]))


def test_an_ensemble_of_seeds_scores_and_picks_with_the_mean(runs, capsys):
    """A random search proposes the same subnets whatever their scores: each is scored, by the ensemble, with the
    mean of the two single searches' scores, and the pick is the best by that mean."""
    one, two = _scores(_search(capsys, runs["a"])), _scores(_search(capsys, runs["b"]))
    d = _search(capsys, runs["a"], "--ensemble", runs["b"])
    both = _scores(d)
    assert both.keys() == one.keys() == two.keys() and len(both) == 6
    assert both == {s: ((one[s][0] + two[s][0]) / 2, (one[s][1] + two[s][1]) / 2) for s in both}
    assert both != one and both != two
    assert tuple(d["best"]["indices"]) == _best(both)
    assert d["best"]["accuracy"] == (one[_best(both)][0] + two[_best(both)][0]) / 2
    assert d["ensemble"] == [str(runs["a"]), str(runs["b"])] and d["ensemble_last"] == []
    assert json.loads((runs["a"] / "search.json").read_text())["ensemble"] == d["ensemble"]
    assert main(["search", str(runs["a"]), *SEARCH[:-1], "--ensemble", str(runs["b"])]) == 0
    assert f"supernets: mean of 2 runs equal but the seed: {runs['a']}, {runs['b']}\n" in capsys.readouterr().out
    # few-shot runs: each member scores an architecture on its own sub-supernet, and the mean is theirs
    f0, f1 = _scores(_search(capsys, runs["few0"])), _scores(_search(capsys, runs["few1"]))
    few = _scores(_search(capsys, runs["few0"], "--ensemble", runs["few1"]))
    assert few == {s: ((f0[s][0] + f1[s][0]) / 2, (f0[s][1] + f1[s][1]) / 2) for s in few}


def test_an_ensemble_of_the_last_two_is_the_mean_of_their_scores(runs, capsys):
    """The final weights and the newest checkpoint (after 8 subnets: its two stage files merged by hand into a whole
    supernet), each scored on the same held-out batches, averaged: what the search reports."""
    run = runs["last"]
    d = _search(capsys, run, "--ensemble-last", "2")
    space, shared = resolve_space(SPACE), parse_shared("serial")
    final = load_weights(space, run, 0, shared)
    at8 = build_stage(space, range(space.num_blocks), 0, shared)
    at8.load_state_dict({k: v for s in (0, 1) for k, v in torch.load(
        position_dir(root_of(run), 8) / f"stage{s}.pt", weights_only=True)["model"].items()})
    batches = heldout_batches(space, HELD)
    ev = [make_evaluator(m, batches) for m in (final, at8)]
    got = _scores(d)
    want = {s: tuple((ev[0](s)[k] + ev[1](s)[k]) / 2 for k in ("accuracy", "loss")) for s in got}
    assert got == want and got != {s: (ev[0](s)["accuracy"], ev[0](s)["loss"]) for s in got}
    assert tuple(d["best"]["indices"]) == _best(want)
    assert d["ensemble"] == [str(run), str(position_dir(root_of(run), 8))]
    assert [e["after_subnets"] for e in d["ensemble_last"]] == [12, 8]
    assert main(["search", str(run), *SEARCH[:-1], "--ensemble-last", "3"]) == 0
    assert (f"supernets: mean of 3 last supernets of {run}: its final weights (after 12 subnets) and its "
            "checkpoints after 8, 4 subnets\n") in capsys.readouterr().out


@pytest.mark.parametrize("argv, msg", [
    (["{a}", "--ensemble", "{lr}"], "--ensemble {a} and {lr} differ in more than the seed: lr 0.02 vs 0.03"),
    (["{a}", "--ensemble", "{a}"], "--ensemble {a} and {a} are the same run (both of seed 0): each seed once"),
    (["{a}", "--ensemble", "{b}", "--ensemble-last", "2"], "--ensemble-last and --ensemble cannot be combined"),
    (["{last}", "--ensemble-last", "4"], "--ensemble-last 4 averages the final weights of {last} and its 3 newest "
     "checkpoints; it keeps 2 complete checkpoints (after 4, 8 subnets): train it with --checkpoint-every E "
     "--keep-checkpoints 3 (or more)"),
    (["{a}", "--ensemble-last", "2"], "it keeps 0 complete checkpoints: naspipe reference writes none"),
    (["{a}", "--ensemble-last", "1"], "--ensemble-last must be >= 2, got 1"),
])
def test_what_cannot_be_averaged_is_refused_before_any_model_loads(runs, capsys, monkeypatch, argv, msg):
    def loads(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a model loaded")

    monkeypatch.setattr(naspipe.search.run, "load_trained_run", loads)
    code = main(["search", *(a.format(**runs) for a in argv), *SEARCH])
    c = capsys.readouterr()
    assert code == 2 and not c.out and len(c.err.strip().splitlines()) == 1, (code, c.err)
    assert msg.format(**runs) in c.err, c.err


def test_the_python_api_scores_with_the_mean_and_refuses_in_one_line(runs):
    a, b = runs["a"], runs["b"]
    kw = {"strategy": "random", "budget": 3, "heldout": HELD, "space": SPACE, "write": False}
    got = search_ensemble(a, ensemble=[b], **kw)
    assert got.ensemble == (str(a), str(b)) and got.to_dict() == search_run(a, members=[Member(a), Member(b)],
                                                                            **kw).to_dict() | {"wall_s": got.wall_s}
    with pytest.raises(ValueError, match=r"--ensemble .* differ in more than the seed: lr 0.02 vs 0.03"):
        search_ensemble(a, ensemble=[runs["lr"]], **kw)
    with pytest.raises(ValueError, match="ensemble must be a list of run folders, not one path"):
        search_ensemble(a, ensemble=str(b), **kw)
    with pytest.raises(ValueError, match="members must be two naspipe.search.run.Member or more"):
        search_run(a, members=[Member(a)], **kw)
