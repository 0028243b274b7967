"""Data-parallel replicas on user supernets whose shards reach different parameters or hold several dtypes
(``tests/helpers/replica_supernets.py``): ``train --replicas 2`` equals ``reference --replicas 2`` bit for bit."""

from __future__ import annotations

import pytest
import torch

from naspipe.cli import main
from naspipe.models.shards import combine_present


def test_a_slot_without_a_gradient_on_some_shards_gets_zeros_and_on_none_stays_none():
    like = torch.zeros(2)
    g = torch.tensor([1.0, 3.0])
    assert combine_present([None, None], like) is None
    assert torch.equal(combine_present([None, g], like), torch.tensor([0.5, 1.5]))
    assert torch.equal(combine_present([g, None], like), torch.tensor([0.5, 1.5]))
    assert combine_present([g.double(), None], like.double()).dtype == torch.float64


@pytest.mark.usefixtures("no_process_left_behind")
@pytest.mark.parametrize("space,policy,shared", [("routed", "csp", "frozen"), ("routed", "csp-bw", "delayed:2"),
                                                 ("mixed_dtype", "csp", "delayed:2"),
                                                 ("parameter_free", "csp", "frozen"),
                                                 ("drift", "csp", "frozen")])
def test_replicas_on_shards_that_differ_equal_the_reference(tmp_path, space, policy, shared):
    common = ["--space", f"replica_supernets:{space}", "--subnets", "8", "--seed", "1", "--shared-layers", shared,
              "--optimizer", "adam", "--no-progress"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", *common, "--replicas", "2", "--out", str(ref)]) == 0
    assert main(["train", *common, "--stages", "2", "--replicas", "2", "--policy", policy, "--jitter-ms", "1",
                 "--out", str(run), "--timeout", "60"]) == 0
    assert main(["verify", str(run), str(ref)]) == 0


@pytest.mark.usefixtures("no_process_left_behind")
def test_a_notebook_reference_of_a_replicated_run_has_its_replicas(tmp_path):
    from replica_supernets import routed

    from naspipe.experiments import start_reference, start_training
    from naspipe.runtime import TrainConfig

    cfg = TrainConfig.create(routed(), tmp_path / "run", stages=2, subnets=6, seed=3, policy="csp",
                             shared_layers="delayed:2", progress=False, replicas=2, timeout=60)
    job = start_training(cfg)
    ref = start_reference(cfg, tmp_path / "ref")
    same, summary = job.wait(120).verify(ref.wait(120))
    assert same, summary


# ---- batch norm on shards (tests/helpers/hunt_supernets.py) ----
def _hunt(function: str, n: int = 6, *extra: str) -> list[str]:
    """``--space hunt_supernets:FUNCTION`` (``tests/helpers/hunt_supernets.py``) with ``n`` subnets."""
    return ["--space", f"hunt_supernets:{function}", "--subnets", str(n), "--no-progress", *extra]


@pytest.mark.usefixtures("no_process_left_behind")
def test_batchnorm_shards_of_two_match_the_reference(tmp_path, capsys):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", *_hunt("batchnorm", 8, "--replicas", "2"), "--out", str(ref)]) == 0, \
        capsys.readouterr().err
    assert main(["train", *_hunt("batchnorm", 8, "--stages", "2", "--replicas", "2"), "--out", str(run)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
