"""Results files: exact loss round trip, tensor hashes, merged per-stage params, and verify's verdicts."""

from __future__ import annotations

import json

import pytest
import torch

from naspipe.runfolder.results import (
    ResultsError,
    param_hashes,
    read_losses,
    read_params,
    tensor_hash,
    verify,
    write_losses,
    write_metrics,
    write_params,
)

LOSSES = {0: 2.302585092994046, 1: 0.1 + 0.2, 2: float.fromhex("0x1.fffffffffffffp-2")}


def _run_dir(path, losses=LOSSES, params=None):
    path.mkdir()
    write_losses(path / "losses.csv", losses)
    params = params or {"a.weight": torch.arange(6.0).reshape(2, 3), "b.bias": torch.zeros(3)}
    write_params(path / "params.json", param_hashes(params))
    return path


def test_losses_round_trip_exactly(tmp_path):
    write_losses(tmp_path / "l.csv", LOSSES)
    assert (tmp_path / "l.csv").read_text().splitlines()[0] == "subnet,loss"
    back = read_losses(tmp_path / "l.csv")
    assert [v.hex() for v in back.values()] == [v.hex() for v in LOSSES.values()]
    (tmp_path / "bad.csv").write_text("subnet,loss\n0,zz\n")
    with pytest.raises(ResultsError, match="line 2"):
        read_losses(tmp_path / "bad.csv")


def test_tensor_hash_sees_dtype_shape_and_bits():
    t = torch.arange(6.0)
    assert tensor_hash(t) == tensor_hash(t.clone())
    assert tensor_hash(t) != tensor_hash(t.reshape(2, 3))
    assert tensor_hash(t) != tensor_hash(t.double())
    assert tensor_hash(torch.tensor([0.0])) != tensor_hash(torch.tensor([-0.0]))
    assert tensor_hash(t.reshape(2, 3).t()) == tensor_hash(t.reshape(2, 3).t().contiguous())
    u = t.clone()
    u[3] = torch.nextafter(u[3], torch.tensor(10.0))
    assert tensor_hash(u) != tensor_hash(t)


def test_params_json_is_sorted_and_stage_files_merge(tmp_path):
    write_params(tmp_path / "p.json", {"z": "1", "a": "2"})
    assert list(json.loads((tmp_path / "p.json").read_text())) == ["a", "z"]
    run = tmp_path / "run"
    run.mkdir()
    write_params(run / "params-stage0.json", {"a": "1"})
    write_params(run / "params-stage1.json", {"b": "2"})
    assert read_params(run) == {"a": "1", "b": "2"}
    write_params(run / "params-stage2.json", {"b": "3"})
    with pytest.raises(ResultsError, match="more than one"):
        read_params(run)
    with pytest.raises(ResultsError, match="no params.json"):
        read_params(tmp_path / "nothing")


def test_verify_identical_and_first_difference(tmp_path):
    a = _run_dir(tmp_path / "a")
    assert verify(a, _run_dir(tmp_path / "b")) == (True, "identical: 3 subnets, 2 tensors")
    changed = dict(LOSSES)
    changed[1] = float.fromhex(LOSSES[1].hex()) + 1e-16
    ok, msg = verify(a, _run_dir(tmp_path / "c", changed))
    assert not ok and msg.startswith("subnet 1: loss")
    ok, msg = verify(a, _run_dir(tmp_path / "d", {0: LOSSES[0], 1: LOSSES[1]}))
    assert not ok and msg.startswith("subnet 2: no loss")
    params = {"a.weight": torch.arange(6.0).reshape(2, 3), "b.bias": torch.tensor([0.0, 1e-30, 0.0])}
    ok, msg = verify(a, _run_dir(tmp_path / "e", params=params))
    assert not ok and msg.startswith("tensor b.bias: hash")
    with pytest.raises(ResultsError, match="cannot read"):
        verify(a, tmp_path / "missing")


def test_write_metrics(tmp_path):
    write_metrics(tmp_path / "m.json", {"wall_s": 1.5, "config": {"shared_layers": "frozen"}})
    assert json.loads((tmp_path / "m.json").read_text())["config"]["shared_layers"] == "frozen"


def test_throughput_line_names_the_time_each_rate_divides_by():
    from naspipe.runtime.outputs import throughput_line

    m = {"subnets": 600, "makespan_s": 14.85, "subnets_per_s": 600 / 14.85, "wall_s": 24.99, "startup_s": 8.1,
         "utilization": 0.71, "final_loss": 1.5}
    line = throughput_line(m)
    assert "14.85 s of training (first task to last task): 40.4 subnets/s" in line
    assert "24.99 s wall clock in all, of which 8.1 s starting the stage processes" in line
    assert "(24.0 subnets per wall-clock second)" in line  # 600 / 24.99: the figure a reader computes
