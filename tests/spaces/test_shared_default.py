"""Issue 27, item 2: a user's ``Fixed`` blocks (stem, head) train by default, and every run says in one line at
start what they do and how to change it.

The default is ``auto``: ``serial`` for a user's own supernet (measured: ``benchmarks/shared_layers.py``), exact,
so every exact policy still verifies bit for bit against the reference, which follows the same default;
``frozen`` for the presets (the paper's setting, under which CSP pipelines).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runspec.spec import DEFAULT_SHARED, RunSpec
from naspipe.spaces.shared import short_list, start_line
from naspipe.spaces.space import resolve_space

TESTS = Path(__file__).resolve().parents[1] / "helpers"  # user_supernets


def test_the_default_trains_a_user_supernets_fixed_blocks_and_keeps_the_presets_frozen():
    from naspipe.spaces.shared import default_for

    assert DEFAULT_SHARED == "auto"
    assert default_for(resolve_space("digits-cnn")) == "frozen"
    assert str(RunSpec.create("digits-cnn", subnets=2).shared) == "frozen"
    assert str(RunSpec.create("user_supernets:good", subnets=2).shared) == "serial"


@pytest.mark.parametrize("shared,says", [("serial", "serial - trained in sequence order"),
                                         ("frozen", "frozen - never trained"),
                                         ("delayed:4", "delayed:4 - trained, subnet j reading them as after subnet "
                                                       "j-5's update")])
def test_the_start_line_names_the_semantics_and_how_to_change_them(shared, says):
    line = start_line(["stem", "head"], shared)
    assert line is not None and "\n" not in line
    assert line.startswith(f"naspipe: shared layers (stem, head): {says}"), line
    offered = line.rpartition("--shared-layers ")[2]
    assert line.endswith(" to change") and "delayed:D" in offered
    assert shared == "delayed:4" or shared not in offered  # the others are offered, not the current one
    assert "shared_layers=" in start_line(["stem"], shared, "shared_layers=")


def test_many_fixed_blocks_stay_one_short_line():
    assert short_list(["stem", "head"]) == "stem, head"
    assert short_list([f"b{i}" for i in range(40)]) == "b0, b1, b2 and 37 more"
    assert "(b0, b1, b2 and 37 more)" in start_line([f"b{i}" for i in range(40)], "frozen")


def test_a_space_without_fixed_blocks_says_nothing():
    assert start_line([], "serial") is None


@pytest.mark.usefixtures("no_process_left_behind")
def test_a_user_supernet_trained_without_shared_layers_trains_its_fixed_blocks(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}:{Path.cwd()}")
    common = ["--space", "user_supernets:good", "--subnets", "6", "--seed", "2"]  # with the bar: the line too
    assert main(["train", *common, "--stages", "2", "--policy", "csp", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "naspipe: shared layers (inp, out): serial - trained in sequence order; --shared-layers " in err, err
    assert main(["reference", *common, "--out", str(tmp_path / "ref")]) == 0
    assert "naspipe: shared layers (inp, out): serial" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "run"), str(tmp_path / "ref")]) == 0

    import naspipe
    from naspipe.models import build_stage
    from naspipe.runfolder.results import param_hashes
    from naspipe.spaces.shared import parse_shared

    space = naspipe.resolve_space("user_supernets:good")
    initial = param_hashes(build_stage(space, range(space.num_blocks), 2, parse_shared("frozen"))
                           .global_named_parameters())
    trained = json.loads((tmp_path / "run" / "params.json").read_text())
    trained = trained.get("params", trained)
    fixed = [k for k in initial if k.split(".")[0] in ("inp", "out") or ".inp." in k or ".out." in k]
    assert fixed and all(k in trained for k in fixed), (fixed, list(trained)[:5])
    assert all(trained[k] != initial[k] for k in fixed)  # the stem and the head moved
    assert json.loads((tmp_path / "run" / "run.json").read_text())["identity"]["shared_layers"] == "serial"


@pytest.mark.usefixtures("no_process_left_behind")
def test_every_exact_policy_verifies_with_the_default(tmp_path, monkeypatch):
    """csp-plan (the default policy), csp-bw, sequential and 2 replicas, each with the default shared layers, are
    bit for bit the reference's (with the same default, and --replicas 2 for the replicated run)."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}:{Path.cwd()}")
    import naspipe

    space = "user_supernets:good"
    ref = naspipe.reference(space, tmp_path / "ref", subnets=8, seed=1)
    ref2 = naspipe.reference(space, tmp_path / "ref2", subnets=8, seed=1, replicas=2)
    for name, kw, against in (("plan", {}, ref), ("bw", {"policy": "csp-bw"}, ref),
                              ("seq", {"policy": "sequential"}, ref), ("rep", {"replicas": 2, "policy": "csp"}, ref2)):
        result = naspipe.train(space, out=tmp_path / name, stages=2, subnets=8, seed=1, progress=False, **kw)
        assert str(result.config.shared) == "serial"
        ok, msg = result.verify(against)
        assert ok, (name, msg)
