"""The probe of a user supernet (``naspipe.supernet.validate``), found by a hostile-user bug hunt
(``tests/helpers/hunt_supernets.py``): what a pipeline cannot reproduce (global randomness, state a fixed block's
forward changes, lazy parameters, unseeded initial weights, a dataset too small, a target that is not one tensor),
a shard of the batch a replica cannot run and a message the transport cannot send are refused in one line before
start; state a forward changes is accepted where runs stay reproducible."""

from __future__ import annotations

import pytest

from naspipe.cli import main

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def _args(function: str, n: int = 6, *extra: str) -> list[str]:
    return ["--space", f"hunt_supernets:{function}", "--subnets", str(n), "--no-progress", *extra]


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


def test_a_message_the_transport_cannot_send_is_refused_for_the_chosen_partition(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["train", *_args("int16_message", 4, "--stages", "4"), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    assert ("block 0 ('clamp'), candidate 0 ('clamp', op 'user', args {}): forward returned a tensor of dtype "
            "torch.int16; this block's output ends a stage, and messages between stages can be") in err, err
    assert not out.exists()
    assert main(["train", *_args("int16_message", 4, "--stages", "1"), "--out", str(out)]) == 0  # no message
