"""Findings of a hostile-user bug hunt on user supernets (``tests/helpers/hunt_supernets.py``): what used to crash,
differ silently or pass the probe and fail in a stage is now either done right or refused in one line up front.
"""

from __future__ import annotations

import pytest

from naspipe.cli import main

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def _args(function: str, n: int = 6, *extra: str) -> list[str]:
    return ["--space", f"hunt_supernets:{function}", "--subnets", str(n), "--no-progress", *extra]


def test_the_reference_ignores_stages_so_a_supernet_of_three_blocks_needs_none(tmp_path, capsys):
    assert main(["reference", *_args("three_blocks"), "--out", str(tmp_path / "r")]) == 0, capsys.readouterr().err


def test_the_reference_trains_subnets_without_a_trainable_parameter_as_train_does(tmp_path, capsys):
    ref, rep, run = tmp_path / "ref", tmp_path / "rep", tmp_path / "run"
    assert main(["reference", *_args("no_params", 12), "--out", str(ref)]) == 0, capsys.readouterr().err
    assert main(["reference", *_args("no_params", 12), "--replicas", "2", "--out", str(rep)]) == 0
    assert main(["train", *_args("no_params", 12), "--stages", "2", "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    assert main(["train", *_args("no_params", 12), "--stages", "2", "--replicas", "2", "--out", str(run),
                 "--overwrite"]) == 0
    assert main(["verify", str(run), str(rep)]) == 0


def test_a_user_error_partway_through_the_reference_is_one_line(tmp_path, capsys):
    rc = main(["reference", *_args("fails_late", 8), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "\n" not in err, err
    assert err == "naspipe: error: subnet 5 of 8: KeyError: 'sample 5 missing'", err


REFUSED = [
    ("dropout", "block 'l1', candidate 'drop': its forward draws from torch's global random generator "
                "(randomness, e.g. dropout)"),
    ("rare_drop", "block 'l1', candidate 'stochastic_depth': its forward draws from torch's global random generator"),
    ("own_generator", "block 'l1', candidate 'noisy': two forwards on the same input from the same state give "
                      "different outputs (randomness, e.g. dropout)"),
    ("spectral_fixed", "fixed block 'sn': its forward changes state its next forward reads"),
    ("lazy", "block 'l1', candidate 'lazy': LazyLinear creates its parameters in its first forward"),
    ("small_dataset", "data is a Dataset of 3 samples, fewer than batch_size 4"),
    ("tuple_target", "data's target must be one tensor, got tuple"),
    ("numpy_init", "block 'l1', candidate 'np': the factory built twice under the same seed gives other initial "
                   "weights ('weight' differs): it draws from a random generator naspipe does not seed (numpy's or "
                   "Python's global one, say)"),
]


@pytest.mark.parametrize("command", ["train", "reference"])
@pytest.mark.parametrize(("function", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_a_pipeline_cannot_reproduce_is_refused_in_one_line_before_start(tmp_path, capsys, command, function,
                                                                              message):
    out = tmp_path / "out"
    rc = main([command, *_args(function, 4, "--stages", "2"), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert err.startswith(f"naspipe: error: --space hunt_supernets:{function}: ") and message in err, err
    assert not out.exists()


@pytest.mark.parametrize(("function", "shared"), [("spectral_choice", "frozen"), ("batchnorm", "frozen"),
                                                  ("batchnorm", "delayed:2"), ("reseeded", "frozen"),
                                                  ("wrong_batch", "frozen")])  # rows: only replicas split them
def test_state_a_forward_changes_is_accepted_where_runs_stay_reproducible(tmp_path, capsys, function, shared):
    ref, run = tmp_path / "ref", tmp_path / "run"
    extra = ("--shared-layers", shared)
    assert main(["reference", *_args(function, 10, *extra), "--out", str(ref)]) == 0, capsys.readouterr().err
    assert main(["train", *_args(function, 10, *extra), "--stages", "3", "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0


@pytest.mark.parametrize("policy", ["csp", "csp-bw"])
def test_integer_messages_between_stages_carry_no_gradient_and_match_the_reference(tmp_path, capsys, policy):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", *_args("int_message", 10), "--out", str(ref)]) == 0, capsys.readouterr().err
    assert main(["train", *_args("int_message", 10), "--stages", "4", "--policy", policy, "--out", str(run)]) == 0, \
        capsys.readouterr().err
    assert main(["verify", str(run), str(ref)]) == 0


SHARDS = [
    ("wrong_batch", "2", "data's input (4, 8) does not hold batch_size 2 samples along dim 0"),
    ("batchnorm", "4", "block 'bn', candidate 'bn': forward on the previous block's output (1, 8) (a shard of 1 of "
                       "batch_size 4 with --replicas 4) raised ValueError: Expected more than 1 value per channel"),
]


@pytest.mark.parametrize("command", ["train", "reference"])
@pytest.mark.parametrize(("function", "replicas", "message"), SHARDS, ids=[s[0] for s in SHARDS])
def test_replicas_probe_a_shard_of_the_batch_before_start(tmp_path, capsys, command, function, replicas, message):
    out = tmp_path / "out"
    rc = main([command, *_args(function, 4, "--stages", "1", "--replicas", replicas), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert err.startswith(f"naspipe: error: space 'hunt_supernets:{function}': ") and message in err, err
    assert not out.exists()


def test_batchnorm_shards_of_two_match_the_reference(tmp_path, capsys):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", *_args("batchnorm", 8, "--replicas", "2"), "--out", str(ref)]) == 0, \
        capsys.readouterr().err
    assert main(["train", *_args("batchnorm", 8, "--stages", "2", "--replicas", "2"), "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0


def test_a_message_the_transport_cannot_send_is_refused_for_the_chosen_partition(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["train", *_args("int16_message", 4, "--stages", "4"), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert "block 0 ('clamp'): its output (torch.int16) ends a stage, and messages between stages can be" in err, err
    assert not out.exists()
    assert main(["train", *_args("int16_message", 4, "--stages", "1"), "--out", str(out)]) == 0  # no message
