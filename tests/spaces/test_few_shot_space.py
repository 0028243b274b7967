"""Few-shot supernets as plain data (issue 42 item 1): the expanded space, the remapped sequence, the refusals.

digits-truth (stem, cell0..cell2 of 6 candidates, head) split on cell0: cell1 and cell2 hold 6 x 6 candidates,
candidate ``c * 6 + k`` being copy ``k`` of candidate ``c``; subnet ``j`` uses copy 0 before the warm-up's end and
copy ``a[cell0]`` after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runspec.few_shot_run import few_shot_run
from naspipe.runspec.spec import RunSpec, RunSpecError
from naspipe.spaces.few_shot import FewShotError, base_of, few_shot_space
from naspipe.spaces.space import resolve_space

SPACE = str(Path(__file__).resolve().parents[2] / "data" / "spaces" / "digits-truth.json")


@pytest.fixture(scope="module")
def base():
    return resolve_space(SPACE)


def test_the_expanded_space_copies_every_other_choice_block(base):
    sp = few_shot_space(base, "cell0", 8, 24)
    assert sp.name == base.name and base_of(sp) is base
    assert [b.k for b in sp.blocks] == [1, 6, 36, 36, 1]  # stem and head shared, the split block unchanged
    assert sp.blocks[1] == base.blocks[1] and sp.blocks[0] == base.blocks[0]
    names = [c.name for c in sp.blocks[2].candidates]
    assert names[:7] == ["conv3@0", "conv3@1", "conv3@2", "conv3@3", "conv3@4", "conv3@5", "conv5@0"]
    assert sp.few_shot.describe() == {"block": "cell0", "copies": 6, "warmup": 8}
    assert few_shot_space(base, 1, 8, 24).few_shot == sp.few_shot  # by index too
    assert few_shot_space(base, "1", 8, 24).few_shot == sp.few_shot


def test_subnets_use_copy_zero_before_the_warmup_and_their_own_copy_after(base):
    sp = few_shot_space(base, "cell0", 8, 24)
    a = (0, 2, 3, 4, 0)  # cell0 picks candidate 2: sub-supernet 2
    assert sp.expand(7, a) == (0, 2, 3 * 6 + 0, 4 * 6 + 0, 0)
    assert sp.expand(8, a) == (0, 2, 3 * 6 + 2, 4 * 6 + 2, 0)
    assert sp.scored(a) == (0, 2, 20, 26, 0)
    assert sp.collapse(sp.expand(8, a)) == a and sp.collapse(sp.expand(0, a)) == a


def test_the_run_description_trains_the_expanded_sequence(base):
    one = RunSpec.create(SPACE, subnets=24, seed=3, policy="csp")
    few = few_shot_run(one, "cell0", 8)
    assert few.space.few_shot.warmup == 8 and few.subnets == 24
    for j in range(24):
        assert few.stream[j] == few.space.expand(j, one.stream[j])
        assert few.space.collapse(few.stream[j]) == one.stream[j]
    assert few_shot_run(one, None, None) is one
    assert few_shot_run(one, "cell1").space.few_shot.warmup == 12  # default: half the subnets


@pytest.mark.parametrize(("block", "warmup", "says"), [
    ("stem", 8, "'stem' is a fixed block"),
    ("head", 8, "'head' is a fixed block"),
    ("nope", 8, "'nope' is not a block of space 'digits-truth'"),
    (9, 8, "has blocks 0..4"),
    ("cell0", 24, "from 0 to 23"),
    ("cell0", -1, "from 0 to 23"),
])
def test_a_split_that_cannot_be_made_is_refused_in_one_line(base, block, warmup, says):
    with pytest.raises(FewShotError, match=says):
        few_shot_space(base, block, warmup, 24)


def test_a_one_candidate_choice_block_is_refused():
    from naspipe.spaces.space import Block, Candidate, SearchSpace

    sp = SearchSpace("t", (Block("a", (Candidate("x"), Candidate("y"))), Block("b", (Candidate("z"),))))
    with pytest.raises(FewShotError, match="'b' has one candidate"):
        few_shot_space(sp, "b", 0, 4)


def test_the_warmup_alone_and_a_run_time_sampler_are_refused():
    one = RunSpec.create(SPACE, subnets=24)
    with pytest.raises(RunSpecError, match="--few-shot-warmup needs --few-shot"):
        few_shot_run(one, None, 4)
    with pytest.raises(RunSpecError, match="generates it at run time"):
        few_shot_run(one, "cell0", 4, sampler="evolution")


@pytest.mark.parametrize("argv", [
    ["--few-shot", "stem"], ["--few-shot", "cell0", "--few-shot-warmup", "24"], ["--few-shot-warmup", "3"],
    ["--few-shot", "cell0", "--sampler", "evolution"],
])
@pytest.mark.parametrize("command", ["train", "reference"])
def test_the_commands_refuse_before_anything_starts(tmp_path, capsys, command, argv):
    out = tmp_path / "run"
    assert main([command, "--space", SPACE, "--subnets", "24", "--out", str(out), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("naspipe: error:"), err
    assert not out.exists()


def test_train_refuses_a_policy_that_keeps_weight_versions(tmp_path, capsys):
    argv = ["train", "--space", SPACE, "--subnets", "24", "--stages", "2", "--policy", "pipedream",
            "--few-shot", "cell0", "--out", str(tmp_path / "run"), "--no-progress"]
    assert main(argv) == 2
    assert "not pipedream" in capsys.readouterr().err
