"""``naspipe train --keep-checkpoints K`` and ``naspipe rank RUN --ensemble-last N``: a run keeps its K newest
complete checkpoints, and rank scores each architecture with the mean over the run's last N supernets (its final
weights and its N - 1 newest checkpoints)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import naspipe
from naspipe.cli import main
from naspipe.models import build_stage, heldout_batches
from naspipe.models.weights import load_weights
from naspipe.runfolder.results import verify
from naspipe.runtime.checkpoint import complete_positions, mark_complete, newest_complete, position_dir, root_of
from naspipe.search.run import make_evaluator
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import resolve_space
from naspipe.truth.records import load
from tests.helpers.runs import _shared
from tests.ranking.conftest import SPACE

FEW = 100
COMMON = ["--space", SPACE, "--subnets", "16", "--shared-layers", "serial", "--optimizer", "momentum", "--seed", "2",
          "--no-progress"]
KEEP = ["--checkpoint-every", "4", "--keep-checkpoints", "3"]


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> dict:  # noqa: ANN001
    """``run``: 16 subnets of digits-truth on two stages, a checkpoint every 4, the 3 newest kept (4, 8, 12);
    ``ref``: its sequential reference; ``few``: the same few-shot on one stage, split on cell0 after a warm-up of 6."""

    def make(d):  # noqa: ANN001
        assert main(["train", *COMMON, *KEEP, "--stages", "2", "--out", str(d / "run")]) == 0
        assert main(["reference", *COMMON, "--out", str(d / "ref")]) == 0
        assert main(["train", *COMMON, *KEEP, "--stages", "1", "--few-shot", "cell0", "--few-shot-warmup", "6",
                     "--out", str(d / "few")]) == 0

    d = _shared(tmp_path_factory, "ensemble_last_runs", make)
    return {name: d / name for name in ("run", "ref", "few")}


def _refused(capsys, argv: list[str], msg: str) -> None:  # noqa: ANN001
    code = main(argv)
    c = capsys.readouterr()
    assert code == 2 and not c.out and len(c.err.strip().splitlines()) == 1, (code, c.err)
    assert msg in c.err, c.err


def _fake(root, c: int, stages=(0, 1)) -> None:  # noqa: ANN001
    d = position_dir(root, c)
    d.mkdir(parents=True)
    for s in stages:
        (d / f"stage{s}.pt").write_bytes(b"x")
        (d / f"stage{s}.json").write_text(json.dumps({"fingerprint": {"stages": 2}}))


@pytest.mark.parametrize("keep, left", [(1, [24, 20]), (3, [24, 20, 16, 8])])
def test_mark_complete_keeps_the_k_newest_complete_positions(tmp_path, keep, left):
    root = tmp_path / "checkpoint"
    for c in (4, 8, 16, 20):
        _fake(root, c)
    _fake(root, 12, stages=(1,))  # incomplete: goes whatever K
    _fake(root, 24, stages=(0,))  # newer, not complete yet: stays
    assert mark_complete(root, 20, 2, keep)
    assert sorted(int(p.name[1:]) for p in root.iterdir() if p.is_dir()) == sorted(left)
    assert complete_positions(root) == [c for c in left if c != 24] and newest_complete(root) == 20


def test_a_run_keeps_its_last_checkpoints_and_the_same_numbers(kept):
    root = root_of(kept["run"])
    assert complete_positions(root) == [12, 8, 4]
    assert sorted(p.name for p in root.iterdir()) == ["c000000004", "c000000008", "c000000012", "complete.json"]
    assert newest_complete(root) == 12  # what --resume continues from
    assert json.loads((kept["run"] / "metrics.json").read_text())["config"]["keep_checkpoints"] == 3
    same, why = verify(kept["run"], kept["ref"])  # keeping checkpoints changes no number
    assert same, why


def test_keep_checkpoints_is_refused_in_one_line(capsys, tmp_path):
    out = ["--space", "digits-cnn", "--subnets", "8", "--no-progress", "--out", str(tmp_path / "o")]
    _refused(capsys, ["train", *out, "--checkpoint-every", "2", "--keep-checkpoints", "0"],
             "--keep-checkpoints must be >= 1, got 0")
    _refused(capsys, ["train", *out, "--checkpoint-every", "2", "--keep-checkpoints", "2.5"],
             "--keep-checkpoints must be a whole number, got '2.5'")
    _refused(capsys, ["train", *out, "--keep-checkpoints", "2"], "--keep-checkpoints 2 needs --checkpoint-every N")
    for bad, msg in ((0, "keep_checkpoints must be a whole number of checkpoints >= 1, got 0"),
                     (2, "keep_checkpoints 2 needs checkpoint_every N")):
        with pytest.raises(ValueError, match=msg):
            naspipe.TrainConfig.create("digits-cnn", tmp_path / "p", subnets=8, keep_checkpoints=bad)
    assert not (tmp_path / "o").exists() and not (tmp_path / "p").exists()


def _scores(model, archs) -> list[dict]:  # noqa: ANN001
    ev = make_evaluator(model, heldout_batches(model.space))
    return [ev(a) for a in archs]


def test_the_ensemble_of_the_last_two_is_the_mean_of_their_scores(kept, seed_runs):
    """The final weights and checkpoint 12, each loaded by hand (the two stages' model state_dicts of the checkpoint
    into a whole supernet), scored, averaged: what rank reports."""
    tr = load(seed_runs["truth"])
    space, shared = resolve_space(SPACE), parse_shared("serial")
    final = _scores(load_weights(space, kept["run"], 2, shared), tr.archs)
    model = build_stage(space, range(space.num_blocks), 2, shared)
    d = position_dir(root_of(kept["run"]), 12)
    model.load_state_dict({k: v for s in (0, 1) for k, v in torch.load(d / f"stage{s}.pt", weights_only=True)[
        "model"].items()})  # (strict: every entry of the whole supernet, once)
    at12 = _scores(model, tr.archs)
    report = naspipe.rank(kept["run"], tr, ensemble_last=2, resamples=FEW)
    for key, got in (("accuracy", report.run.accuracy), ("loss", report.run.loss)):
        assert got == pytest.approx([(a[key] + b[key]) / 2 for a, b in zip(final, at12, strict=True)], abs=1e-12)
    assert report.run.accuracy != [a["accuracy"] for a in final]  # (the checkpoint differs from the final weights)
    assert report.run.after_subnets() == [16, 12]
    assert naspipe.rank(kept["run"], tr, resamples=FEW).run.accuracy == [a["accuracy"] for a in final]


def test_the_report_names_the_supernets_averaged(kept, seed_runs, capsys):
    run = str(kept["run"])
    argv = ["rank", run, "--truth", str(seed_runs["truth"]), "--ensemble-last", "3", "--resamples", str(FEW)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (f"run:   mean of 3 last supernets of {run}: its final weights (after 16 subnets) and its checkpoints "
            "after 12, 8 subnets") in out
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    names = [run, *(str(position_dir(root_of(run), c)) for c in (12, 8))]
    assert d["ensemble"] == names and [e["after_subnets"] for e in d["ensemble_last"]] == [16, 12, 8]
    assert all(r["run_accuracy"] == pytest.approx(sum(r["ensemble_accuracy"]) / 3) for r in d["architectures"])
    # few-shot: its checkpoints at or after the warm-up's end (6) average on their sub-supernets; one before is refused
    few = naspipe.rank(kept["few"], seed_runs["truth"], ensemble_last=3, resamples=FEW)
    assert few.run.after_subnets() == [16, 12, 8] and len(set(few.run.accuracy)) > 1
    _refused(capsys, ["rank", str(kept["few"]), "--truth", str(seed_runs["truth"]), "--ensemble-last", "4"],
             "the checkpoint after 4 subnets of few-shot run")


def test_what_cannot_be_averaged_is_refused_before_any_model_loads(kept, seed_runs, capsys):
    run, truth = str(kept["run"]), ["--truth", str(seed_runs["truth"])]
    _refused(capsys, ["rank", run, *truth, "--ensemble-last", "5"],
             f"--ensemble-last 5 averages the final weights of {run} and its 4 newest checkpoints; it keeps 3 "
             "complete checkpoints (after 4, 8, 12 subnets): train it with --checkpoint-every E --keep-checkpoints 4")
    _refused(capsys, ["rank", run, *truth, "--ensemble-last", "1"], "--ensemble-last must be >= 2, got 1")
    _refused(capsys, ["rank", run, *truth, "--ensemble-last", "2", "--ensemble", str(seed_runs["ref1"])],
             "--ensemble-last and --ensemble cannot be combined")
    _refused(capsys, ["rank", str(seed_runs["ref"]), *truth, "--ensemble-last", "2"],
             "it keeps 0 complete checkpoints: naspipe reference writes none: train it with naspipe train "
             "--checkpoint-every E")
    _refused(capsys, ["rank", "--proxy", "params", *truth, "--ensemble-last", "2"], "drop --ensemble-last")
    with pytest.raises(ValueError, match="an ensemble is the mean of two supernets or more"):
        naspipe.rank(run, seed_runs["truth"], ensemble_last=1)
    with pytest.raises(ValueError, match="--ensemble-last must be a whole number >= 0, got '3'"):
        naspipe.rank(run, seed_runs["truth"], ensemble_last="3")


def test_a_damaged_checkpoint_is_one_line_not_a_traceback(kept, seed_runs, capsys, tmp_path):
    """A kept checkpoint whose stage file no longer matches its sidecar, or whose sidecar is unreadable: one line,
    exit 2, naming the file."""
    run = tmp_path / "run"
    shutil.copytree(kept["run"], run)
    truth = ["--truth", str(seed_runs["truth"])]
    newest = position_dir(root_of(run), complete_positions(root_of(run))[0])
    with open(newest / "stage1.pt", "ab") as f:
        f.write(b"xx")
    _refused(capsys, ["rank", str(run), *truth, "--ensemble-last", "2"],
             f"checkpoint file '{newest / 'stage1.pt'}' is corrupted")
    (newest / "stage0.json").write_text("{not json")
    _refused(capsys, ["rank", str(run), *truth, "--ensemble-last", "2"],
             f"checkpoint file '{newest / 'stage0.json'}' is corrupted")
