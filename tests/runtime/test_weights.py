"""A runtime run saves its trained weights (one ``weights-stage<s>.pt`` per stage), so it can be searched."""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main
from naspipe.models.weights import load_weights, read_weights
from naspipe.runfolder.results import param_hashes, read_params
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.config import prepare_out_dir
from naspipe.spaces.shared import parse_shared


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("weights") / "run"
    cfg = TrainConfig.create("digits-cnn", out, stages=2, subnets=12, seed=1, progress=False, timeout=60)
    train(cfg)
    return out


def test_each_stage_saves_its_weights_and_they_hash_to_params_json(run_dir):
    files = sorted(p.name for p in run_dir.glob("weights-stage*.pt"))
    assert files == ["weights-stage0.pt", "weights-stage1.pt"]
    params = read_params(run_dir)
    weights = read_weights(run_dir)  # the stage files merged (a name in two files would be refused)
    assert set(weights) == set(params)
    assert param_hashes(weights) == params
    model = load_weights(weights_space(run_dir), run_dir, seed=99, shared=parse_shared("frozen"))
    assert param_hashes(model.global_named_parameters()) == params


def test_search_reads_a_runtime_run(run_dir, capsys):
    assert main(["search", str(run_dir), "--strategy", "random", "--budget", "4", "--heldout", "4",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["best"] is not None
    assert (run_dir / "search.json").is_file()


def test_overwrite_clears_the_weights_of_the_earlier_run(tmp_path):
    out = tmp_path / "again"
    out.mkdir()
    (out / "params.json").write_text("{}")
    (out / "weights-stage3.pt").write_bytes(b"old")
    prepare_out_dir(out, overwrite=True)
    assert not list(out.glob("weights-stage*.pt"))
    assert not (out / "params.json").exists() and (out / "parts").is_dir()


def weights_space(run_dir):
    from naspipe.spaces.space import resolve_space

    return resolve_space(json.loads((run_dir / "metrics.json").read_text())["config"]["space"])
