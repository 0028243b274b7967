"""The sequential reference: shared-layer semantics (frozen, serial, delayed:D), and the CLI round trip."""

from __future__ import annotations

import json

import pytest
import torch

import naspipe.oracle.sequential_trainer as reference
from naspipe.cli import main
from naspipe.models import build_stage
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes, read_losses, tensor_hash
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import SharedLayers, parse_shared
from naspipe.spaces.space import preset

SPACE = preset("digits-cnn")


def _hash(params: dict) -> str:
    return tensor_hash(torch.cat([p.detach().reshape(-1) for _, p in sorted(params.items())]))


def test_frozen_keeps_fixed_blocks_and_trains_candidates():
    stream = UniformStream(SPACE, 0, 5)
    init = build_stage(SPACE, range(SPACE.num_blocks), 0, SharedLayers()).global_named_parameters()
    res = train_reference(SPACE, stream, 0, SharedLayers("frozen"))
    after = res.model.global_named_parameters()
    fixed = res.model.fixed_named_parameters()
    assert all(torch.equal(after[n], init[n]) for n in fixed)
    assert any(not torch.equal(after[n], init[n]) for n in after if n not in fixed)
    assert sorted(res.losses) == list(range(5)) and all(isinstance(v, float) for v in res.losses.values())


def test_serial_is_delayed0_and_differs_from_frozen():
    stream = UniformStream(SPACE, 1, 4)
    frozen = train_reference(SPACE, stream, 1, parse_shared("frozen"))
    serial = train_reference(SPACE, stream, 1, parse_shared("serial"))
    d0 = train_reference(SPACE, stream, 1, parse_shared("delayed:0"))
    d2 = train_reference(SPACE, stream, 1, parse_shared("delayed:2"))
    assert serial.losses == d0.losses
    assert param_hashes(serial.model.global_named_parameters()) == param_hashes(d0.model.global_named_parameters())
    assert frozen.losses[0] == serial.losses[0] and frozen.losses[1] != serial.losses[1]
    # with D=2, subnets 1 and 2 still read v_0, like frozen; subnet 3 reads v_1
    assert [d2.losses[j] == frozen.losses[j] for j in range(4)] == [True, True, True, False]


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_delayed_subnet_j_reads_version_j_minus_d(monkeypatch, delay):
    """Record, per subnet, the fixed weights it read and the live ones; check that ``v_max(0, j-D)`` was
    read and that plain SGD applied the gradient taken at that version to the live weights."""
    reads: list[dict] = []
    lives: list[dict] = []

    def recording_build(*args, **kw):
        model = build_stage(*args, **kw)
        plain = model.forward

        def forward(x, subnet, fixed_params=None):
            reads.append(fixed_params)
            lives.append({n: p.detach().clone() for n, p in model.fixed_named_parameters().items()})
            return plain(x, subnet, fixed_params=fixed_params)

        model.forward = forward
        return model

    monkeypatch.setattr(reference, "build_stage", recording_build)
    lr, n = 0.1, 6
    res = train_reference(SPACE, UniformStream(SPACE, 2, n), 2, parse_shared(f"delayed:{delay}"), "sgd", lr)
    lives.append({k: p.detach() for k, p in res.model.fixed_named_parameters().items()})  # lives[k] = v_k
    assert len({_hash(v) for v in lives}) == n + 1  # every subnet changed the shared weights
    for j in range(n):
        assert _hash({k: t.detach() for k, t in reads[j].items()}) == _hash(lives[max(0, j - delay)]), j
        stepped = {k: lives[j][k].add(reads[j][k].grad, alpha=-lr) for k in lives[j]}
        assert _hash(stepped) == _hash(lives[j + 1]), j


def test_reference_trains_the_transformer_and_records_its_config():
    """On one intra-op thread (recorded), the caller's count given back (a notebook's kernel kept one thread)."""
    space = preset("tiny-transformer")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        res = train_reference(space, UniformStream(space, 0, 3), 0, SharedLayers("frozen"), "adam")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(res.losses) == 3 and res.config["shared_layers"] == "frozen" and res.config["threads"] == 1


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    rc = main(["reference", "--space", "digits-cnn", "--subnets", "8", "--seed", "4", "--out", str(out),
               "--no-progress", "--stages", "3", "--policy", "csp", "--window", "5", *extra])
    return rc, out


def test_cli_reference_and_verify_round_trip(tmp_path, capsys):
    rc, a = _run(tmp_path, "a", "--shared-layers", "delayed:1", "--optimizer", "adam", "--lr", "0.002")
    assert rc == 0
    rc, b = _run(tmp_path, "b", "--shared-layers", "delayed:1", "--optimizer", "adam", "--lr", "0.002")
    assert rc == 0
    metrics = json.loads((a / "metrics.json").read_text())
    assert metrics["config"]["shared_layers"] == "delayed:1" and metrics["config"]["optimizer"] == "adam"
    assert metrics["config"]["lr"] == 0.002 and metrics["subnets_per_s"] > 0
    assert sorted(read_losses(a / "losses.csv")) == list(range(8))
    capsys.readouterr()
    assert main(["verify", str(a), str(b)]) == 0
    n_tensors = len(json.loads((a / "params.json").read_text()))
    assert capsys.readouterr().out.strip() == f"identical: 8 subnets, {n_tensors} tensors"
    rc, c = _run(tmp_path, "c", "--shared-layers", "delayed:2", "--optimizer", "adam", "--lr", "0.002")
    assert main(["verify", str(a), str(c)]) == 1
    assert "subnet 2: loss" in capsys.readouterr().out
    assert main(["verify", str(a), str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--optimizer", "lamb"], "invalid choice: 'lamb'"),
    (["--lr", "-1"], "--lr must be a finite number > 0"),
    (["--space", "naspipe-k12"], "no torch model"),
    (["--shared-layers", "delayed:x"], "delayed:D"),
])
def test_cli_reference_bad_input_exits_2(tmp_path, capsys, args, message):
    rc = main(["reference", "--subnets", "2", "--out", str(tmp_path / "x"), "--no-progress", *args])
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


# issue 13, hole 1: the library's reference records its identity as the command's does
def test_the_python_reference_records_its_identity_too(tmp_path):
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.sequences.sequence import UniformStream
    from naspipe.spaces.shared import SharedLayers

    space = preset("digits-cnn")
    stream = UniformStream(space, 0, 3)
    train_reference(space, stream, 0, SharedLayers(), threads=2).save(tmp_path / "r")
    data = json.loads((tmp_path / "r" / "run.json").read_text())
    assert data["kind"] == "reference"
    ident = data["identity"]
    assert ident["threads"] == 2 and ident["subnets"] == 3 and ident["sequence_sha256"] == stream.digest()


# ---- user supernets from a hostile-user bug hunt (tests/helpers/hunt_supernets.py) ----
def _hunt(function: str, n: int = 6, *extra: str) -> list[str]:
    """``--space hunt_supernets:FUNCTION`` (``tests/helpers/hunt_supernets.py``) with ``n`` subnets."""
    return ["--space", f"hunt_supernets:{function}", "--subnets", str(n), "--no-progress", *extra]


@pytest.mark.usefixtures("no_process_left_behind")
def test_the_reference_ignores_stages_so_a_supernet_of_three_blocks_needs_none(tmp_path, capsys):
    assert main(["reference", *_hunt("three_blocks"), "--out", str(tmp_path / "r")]) == 0, capsys.readouterr().err


@pytest.mark.usefixtures("no_process_left_behind")
def test_the_reference_trains_subnets_without_a_trainable_parameter_as_train_does(tmp_path, capsys):
    ref, rep, run = tmp_path / "ref", tmp_path / "rep", tmp_path / "run"
    args = _hunt("no_params", 12, "--shared-layers", "frozen")  # a frozen head: some subnets train nothing
    assert main(["reference", *args, "--out", str(ref)]) == 0, capsys.readouterr().err
    assert main(["reference", *args, "--replicas", "2", "--out", str(rep)]) == 0
    assert main(["train", *args, "--stages", "2", "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    assert main(["train", *args, "--stages", "2", "--replicas", "2", "--out", str(run),
                 "--overwrite"]) == 0
    assert main(["verify", str(run), str(rep)]) == 0


@pytest.mark.usefixtures("no_process_left_behind")
def test_a_user_error_partway_through_the_reference_is_one_line(tmp_path, capsys):
    rc = main(["reference", *_hunt("fails_late", 8), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "\n" not in err, err
    assert err == "naspipe: error: subnet 5 of 8: KeyError: 'sample 5 missing'", err
