"""A user supernet's identity, its cost profile and the plan of it: what a bug hunt found wrong.

A run of a notebook supernet is searched with its own definition (not a later one of the same name); costs
never change a run's identity (re-profiling keeps verify and --resume working); a cost profile is validated
field by field and written atomically, and ``naspipe profile`` refuses an unwritable destination before it
measures; ``plan`` names unit costs; refusals of replicas and losses say what is wrong.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import naspipe
from naspipe.cli import main
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.search import search_run
from naspipe.spaces.shared import parse_shared

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

GOOD = "user_supernets:good"


def _data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 4, generator=g)
    return x, (x.sum(1) > 0).long()


def _tiny(act, costs=None) -> naspipe.Supernet:
    class B(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return act(self.a(x))

    return naspipe.Supernet([naspipe.Choice("l0", {"x": B, "y": lambda: nn.Linear(4, 4)}),
                             naspipe.Fixed("head", lambda: nn.Linear(4, 2))], data=_data, loss=F.cross_entropy,
                            batch_size=4, costs=costs)


def _reference(sn: naspipe.Supernet, out, n: int = 4):
    sp = naspipe.resolve_space(sn)
    ref = train_reference(sp, naspipe.UniformStream(sp, 0, n), 0, parse_shared("frozen"))
    ref.save(out, weights=True, metrics={"config": ref.config})
    return ref


def _losses(result) -> list[tuple]:
    return sorted((e.subnet, e.loss) for e in result.evaluated)


def test_a_notebook_supernets_run_is_searched_with_its_own_definition(tmp_path):
    """Finding 5: another unnamed supernet defined later (same labels and shapes) must not replace run A's."""
    from naspipe.supernet.load import recorded_space

    a = _tiny(torch.relu)
    _reference(a, tmp_path / "a")
    before = _losses(search_run(tmp_path / "a", budget=2, seed=0, write=False))
    naspipe.resolve_space(_tiny(lambda t: -t))  # also named 'supernet'
    assert _losses(search_run(tmp_path / "a", budget=2, seed=0, write=False)) == before
    assert naspipe.supernet.load.supernet_of(recorded_space(tmp_path / "a", "supernet")) is a  # what report reads
    # the recorded token is process-local: not part of what verify compares
    ident = json.loads((tmp_path / "a" / "run.json").read_text())["identity"]
    assert ident["definition"] and "definition" not in naspipe.runfolder.runs.IDENTITY


def test_costs_do_not_change_a_runs_identity(tmp_path):
    """Finding 12: re-profiling keeps the run identity (verify) and the checkpoint fingerprint (--resume)."""
    from naspipe.runfolder.results import verify
    from naspipe.runtime.checkpoint import fingerprint
    from naspipe.sim.plan_choice import eps_of

    sn = _tiny(torch.relu)
    profiled = sn.with_costs(naspipe.measure_costs(sn, repeats=1))
    a, b = naspipe.resolve_space(sn), naspipe.resolve_space(profiled)
    assert a.blocks[0].candidates[0].fwd != b.blocks[0].candidates[0].fwd and a.digest() == b.digest()
    _reference(sn, tmp_path / "a")
    _reference(profiled, tmp_path / "b")
    ok, msg = verify(tmp_path / "a", tmp_path / "b")
    assert ok, msg
    fps = [fingerprint(naspipe.TrainConfig.create(s, tmp_path / "o", stages=2, subnets=4)) for s in (sn, profiled)]
    # csp-plan's plan follows from the costs (measured: it may differ from one profiling to the next); a resume
    # adopts the checkpoint's (test_a_run_resumes_after_its_space_is_re_profiled). Everything else is equal.
    policies = [fp.pop("policy") for fp in fps]
    assert fps[0] == fps[1]
    assert [(p.partition(":plan=")[0], eps_of(p)) for p in policies] == [("csp-plan", eps_of("csp-plan"))] * 2
    # what a run computes still counts: another batch size, another candidate name
    assert naspipe.resolve_space(naspipe.Supernet(sn.blocks, data=lambda j, g: tuple(t[:2] for t in _data(j, g)),
                                                  loss=F.cross_entropy, batch_size=2)).digest() != a.digest()
    c = naspipe.preset("digits-cnn")
    assert c.digest() != naspipe.preset("tiny-transformer").digest()


def test_a_resume_refusal_names_the_default_replicas_not_null(tmp_path):
    """Lower finding: a one-replica checkpoint records no replicas; the refusal says 1, not null."""
    from naspipe.runtime.checkpoint import CheckpointError, check_resume, fingerprint, position_dir, root_of

    one = naspipe.TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=8, checkpoint_every=4)
    two = one.replace(replicas=2)
    d = position_dir(root_of(tmp_path / "o"), 4)
    d.mkdir(parents=True)
    for cfg, other, want in ((one, two, "taken with replicas 1, but the arguments give replicas 2"),
                             (two, one, "taken with replicas 2, but the arguments give replicas 1")):
        for s in range(2):
            (d / f"stage{s}.json").write_text(json.dumps({"fingerprint": fingerprint(cfg), "bytes": 0,
                                                          "sha256": "", "position": 4}))
        with pytest.raises(CheckpointError, match=want):
            check_resume(other, tmp_path / "o")


def test_profile_refuses_an_unwritable_destination_before_it_measures(tmp_path, capsys, monkeypatch):
    """Finding 11: a directory, a file where a folder belongs, a read-only folder: exit 2, one line, nothing
    measured; the profile is written atomically (no temporary file left beside it)."""
    import naspipe.fileio.atomic as atomic
    import naspipe.preflight.measure as measure

    def boom(*a, **k):
        raise AssertionError("measured before the destination was checked")

    (tmp_path / "f").write_text("x")
    with monkeypatch.context() as m:
        m.setattr(measure, "measure_costs", boom)
        for out, msg in ((tmp_path, "is a directory; give the profile's file name"),
                         (tmp_path / "f" / "p.json", "is not a directory")):
            assert main(["profile", "--space", GOOD, "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and msg in err, err

        def read_only(*a, **k):
            raise OSError(30, "Read-only file system")

        m.setattr(atomic.tempfile, "mkdtemp", read_only)
        assert main(["profile", "--space", GOOD, "--out", str(tmp_path / "p.json")]) == 2
        assert "cannot be written: Read-only file system" in capsys.readouterr().err
    assert main(["profile", "--space", GOOD, "--repeats", "1", "--out", str(tmp_path / "p.json")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "p.json"]


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["candidates"]["b0"]["h8"].update(fwd="fast"), "block 'b0', candidate 'h8': field 'fwd' must be a "
                                                               "number in [0, 1e+06], got 'fast'"),
    (lambda d: [1], "must be a JSON object with 'candidates'"),
    (lambda d: d["candidates"]["b1"]["h16"].update(bwd=1e308), "candidate 'h16': field 'bwd' must be a number"),
    (lambda d: d["candidates"]["b1"]["h16"].update(fwd=-1), "field 'fwd' must be a number in [0, 1e+06], got -1"),
    (lambda d: d.update(message_bytes=-3), "field 'message_bytes' must be a whole number in [0, 2**50], got -3"),
    (lambda d: d["candidates"]["b1"].update(h9={}), "block 'b1', candidate 'h9' is not in the supernet"),
    (lambda d: d["candidates"].update(b9={}), "block 'b9' is not in the supernet"),
])
def test_a_corrupt_cost_profile_is_refused_in_one_line(tmp_path, good_profile, edit, message):
    """Finding 11: every reader of a profile (simulate, plan, train) refuses it before anything starts."""
    from naspipe.supernet import load_spec

    prof = json.loads(json.dumps(good_profile))
    prof = edit(prof) or prof
    path = tmp_path / "p.json"
    path.write_text(json.dumps(prof))
    with pytest.raises(naspipe.SupernetError, match=re.escape(message)):
        naspipe.resolve_space(load_spec(GOOD).with_costs(str(path)))


@pytest.fixture(scope="module")
def good_profile() -> dict:
    from naspipe.supernet import load_spec

    return naspipe.measure_costs(load_spec(GOOD), repeats=1)


def test_plan_names_unit_costs_of_an_unprofiled_supernet(capsys):
    """Finding 14: the planner's 0 B memory and 0% exchange come with the note that the costs are unit costs."""
    assert main(["plan", "--devices", "2", "--space", GOOD, "--subnets", "10"]) == 0
    err = capsys.readouterr().err
    assert "naspipe: note: unit costs" in err and "naspipe profile --space user_supernets:good" in err
    assert main(["plan", "--devices", "2", "--space", "digits-cnn", "--subnets", "10"]) == 0
    assert "unit costs" not in capsys.readouterr().err


def test_refusals_say_what_is_wrong_with_replicas_and_an_integer_loss(tmp_path, capsys):
    """Lower findings: huge --replicas is refused for the batch it cannot split (not as a memory matter); an
    integer scalar loss is named by its dtype (not 'got ()')."""
    assert main(["train", "--space", "digits-cnn", "--stages", "2", "--replicas", "99999999999", "--subnets", "4",
                 "--out", str(tmp_path / "o")]) == 2
    assert "replicas 99999999999 must divide the batch size 32" in capsys.readouterr().err
    sn = naspipe.Supernet(_tiny(torch.relu).blocks, data=_data, loss=lambda o, t: (o.argmax(1) == t).sum(),
                          batch_size=4)
    with pytest.raises(naspipe.SupernetError, match=r"got a scalar of dtype torch.int64 \(last block 'head'\); "
                                                    "compute it in floating point"):
        naspipe.resolve_space(sn)



def _checkpoint_at_4(out, cfg) -> None:  # noqa: ANN001
    """A complete (empty) two-stage checkpoint at subnet 4 under ``out`` with ``cfg``'s fingerprint."""
    import hashlib

    from naspipe.runtime.checkpoint import fingerprint, position_dir, root_of

    d = position_dir(root_of(out), 4)
    d.mkdir(parents=True)
    for s in range(2):
        (d / f"stage{s}.pt").write_bytes(b"")
        (d / f"stage{s}.json").write_text(json.dumps({"fingerprint": fingerprint(cfg), "bytes": 0, "position": 4,
                                                      "sha256": hashlib.sha256(b"").hexdigest()}))

def test_a_run_resumes_after_its_space_is_re_profiled(tmp_path):
    """Finding 12: the default partition and csp-plan's plan follow from costs; a resume takes the checkpoint's."""

    from naspipe.runtime.checkpoint import CheckpointError, apply_resume
    from naspipe.supernet import load_spec

    sn = load_spec(GOOD)
    before = naspipe.TrainConfig.create(sn, tmp_path / "o", stages=2, subnets=8, seed=1, checkpoint_every=4)
    heavy = {"candidates": {b.label: {c: {"fwd": 1e-3, "bwd": 2e-3} for c in b.candidates} for b in sn.blocks}}
    heavy["candidates"]["inp"]["inp"] = {"fwd": 10.0, "bwd": 20.0}  # the stem alone outweighs the rest
    after = naspipe.TrainConfig.create(sn.with_costs(heavy), tmp_path / "o", stages=2, subnets=8, seed=1,
                                       checkpoint_every=4)
    assert after.partition != before.partition
    _checkpoint_at_4(tmp_path / "o", before)
    resumed = apply_resume(after, tmp_path / "o")
    assert (resumed.partition, resumed.policy, resumed.start) == (before.partition, before.policy, 4)
    with pytest.raises(CheckpointError, match="taken with seed 1, but the arguments give seed 2"):
        apply_resume(after.replace(seed=2), tmp_path / "o")  # what the numbers depend on is still refused
    with pytest.raises(CheckpointError, match="taken with threads 1, but the arguments give threads 2"):
        apply_resume(after.replace(threads=2), tmp_path / "o")  # the cause, not the partition that costs moved
    # the costs chose another plan today: plain csp-plan continues the checkpoint's; a named plan is refused
    replanned = after.replace(policy="csp-plan:plan=77,eps=0.2")
    assert apply_resume(replanned, tmp_path / "o", adopt_plan=True).policy == before.policy
    with pytest.raises(CheckpointError, match="but the arguments give policy 'csp-plan:plan=77,eps=0.2'"):
        apply_resume(replanned, tmp_path / "o")
    with pytest.raises(CheckpointError, match="policy"):  # another order is not a plan the costs chose
        apply_resume(after.replace(policy="csp-cp"), tmp_path / "o", adopt_plan=True)


def test_the_same_command_resumes_after_profiling_changed_the_plan(tmp_path, monkeypatch):
    """Second hunt, finding 1: train (plain csp-plan) -> profile -> the same command with --resume: the plan the
    new costs choose differs, and the resume continues the checkpoint's instead of refusing the same command."""

    from naspipe.runtime import config as config_module
    from naspipe.sim.plan_choice import needs_plan
    from naspipe.supernet import load_spec

    sn = load_spec(GOOD)
    first = naspipe.TrainConfig.create(sn, tmp_path / "o", stages=2, subnets=8, seed=1, checkpoint_every=4)
    _checkpoint_at_4(tmp_path / "o", first)
    monkeypatch.setattr(config_module.TrainConfig, "planned",
                        lambda self: self.replace(policy="csp-plan:plan=99,eps=0.2"))  # what new costs chose
    resumed = naspipe.TrainConfig.create(sn, tmp_path / "o", stages=2, subnets=8, seed=1, checkpoint_every=4,
                                         resume=tmp_path / "o")
    assert (resumed.policy, resumed.start) == (first.policy, 4)

    # the command line builds its config its own way (train's --resume): the same rule
    from naspipe.cli import build_parser
    from naspipe.cli.cmd_train import config_from_args

    def command(*extra: str) -> list[str]:
        return ["train", "--space", GOOD, "--stages", "2", "--subnets", "8", "--seed", "1", "--checkpoint-every",
                "4", "--out", str(tmp_path / "c"), *extra]

    monkeypatch.undo()
    first = config_from_args(build_parser().parse_args(command()))
    _checkpoint_at_4(tmp_path / "c", first)
    monkeypatch.setattr(config_module.TrainConfig, "planned", lambda self: self.replace(
        policy="csp-plan:plan=99,eps=0.2") if needs_plan(self.policy) else self)
    resumed = config_from_args(build_parser().parse_args(command("--resume", str(tmp_path / "c"))))
    assert (resumed.policy, resumed.start) == (first.policy, 4)
    with pytest.raises(Exception, match="but the arguments give policy 'csp-plan:plan=98"):  # a named plan stays
        config_from_args(build_parser().parse_args(command("--policy", "csp-plan:plan=98",
                                                           "--resume", str(tmp_path / "c"))))


def test_implausibly_large_costs_of_a_json_space_are_refused(tmp_path, capsys):
    """Finding 11, the same bound for a JSON space: 1e308 s would overflow the planner's sums (ZeroDivisionError)."""
    blocks = [{"name": "a", "candidates": [{"name": "x", "fwd": 1e308}]}, {"name": "b", "candidates": [{"name": "y"}]}]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"name": "big", "blocks": blocks}))
    assert main(["plan", "--devices", "2", "--space", str(path), "--subnets", "10"]) == 2
    err = capsys.readouterr().err
    assert err == "naspipe: error: big.json: blocks[0].candidates[0]: field 'fwd' must be at most 1e+06, got 1e+308\n"
    path.write_text(json.dumps({"name": "big", "blocks": blocks[1:], "message_bytes": 2**60}))
    assert main(["plan", "--devices", "2", "--space", str(path), "--subnets", "10"]) == 2
    assert "field 'message_bytes' must be at most 2**50" in capsys.readouterr().err


PROFILED = '''
import torch
import torch.nn.functional as F
from torch import nn

import naspipe


def data(j, g):
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


def supernet():
    cands = {"a": lambda: nn.Linear(8, 8), "b": lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU())}
    return naspipe.Supernet([naspipe.Choice("l0", {**cands, **EXTRA}), naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
                            data=data, loss=F.cross_entropy, batch_size=4)
'''


def _profiled_module(folder, name: str, extra: str = "{}") -> str:
    import shutil

    from naspipe.supernet import load

    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(PROFILED.replace("EXTRA", extra))
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    load.forget(f"{name}:supernet")
    return f"{name}:supernet"


def test_a_stale_cost_profile_is_refused_with_the_command_that_re_measures_it(tmp_path, capsys, monkeypatch):
    """Finding 4: a candidate added after profiling used to be costed 1 s (measured about 0.1 ms) with no note,
    and the profile's batch size was never compared with the supernet's."""
    import sys

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path / "user"))
    name = f"stale_{tmp_path.name[-12:].replace('-', '_')}"
    spec = _profiled_module(tmp_path / "user", name)
    prof = tmp_path / "user" / f"{name}.supernet.costs.json"
    sim = ["simulate", "--space", spec, "--stages", "2", "--subnets", "10"]

    def refused(message: str) -> None:
        capsys.readouterr()
        assert main(sim) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err

    assert main(["profile", "--space", spec, "--repeats", "1"]) == 0 and prof.is_file()
    assert main(sim) == 0 and "unit costs" not in capsys.readouterr().err
    _profiled_module(tmp_path / "user", name, '{"new": lambda: nn.Linear(8, 8)}')
    refused(f"naspipe: error: cost profile {str(prof)!r}: block 'l0', candidate 'new' has no cost (the profile is "
            f"older than the supernet, or partial); measure again with naspipe profile --space {spec}")
    assert main(["profile", "--space", spec, "--repeats", "1"]) == 0  # the stale profile does not stop it
    assert main(sim) == 0
    data = json.loads(prof.read_text())
    prof.write_text(json.dumps({**data, "batch_size": 8}))
    refused(f"cost profile {str(prof)!r} was measured at batch size 8, the supernet's is 4 (times grow with the "
            f"batch): it is stale; measure again with naspipe profile --space {spec}")
    del data["candidates"]["l0"]["a"]["bwd"]
    prof.write_text(json.dumps(data))
    refused("block 'l0', candidate 'a' has no 'bwd' (the profile is older than the supernet, or partial)")
    # in Python: the command is measure_costs; a profile given as a path elsewhere is re-measured with --out
    from naspipe.supernet import load_spec

    sn = load_spec(spec)
    with pytest.raises(naspipe.SupernetError, match=re.escape("candidate 'b' has no cost (the profile is older "
                                                              "than the supernet, or partial); measure again with "
                                                              "naspipe.measure_costs(supernet)")):
        naspipe.resolve_space(sn.with_costs({"candidates": {"l0": {"a": {"fwd": 1.0, "bwd": 1.0}}}}))
    assert naspipe.measure_costs(sn.with_costs(str(prof)), repeats=1)["batch_size"] == 4  # measured despite it


def test_simulate_does_not_print_unit_costs_as_seconds(capsys):
    """Finding 11: an unprofiled supernet's makespan was printed as '... s'."""
    assert main(["simulate", "--space", GOOD, "--stages", "2", "--subnets", "10"]) == 0
    out = capsys.readouterr().out
    assert " units " in out and "subnets per unit" in out and "unit costs (not measured)" in out, out
    assert not re.search(r"\d s\b|/s\b", out), out
    assert main(["simulate", "--space", GOOD, "--stages", "2", "--subnets", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_unit"] == "unit"
    assert main(["simulate", "--space", "digits-cnn", "--stages", "2", "--subnets", "10"]) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and " s " in out and "units" not in out, out
    # naspipe plan labelled them subnets/s, and its JSON did not say which unit
    assert main(["plan", "--space", GOOD, "--devices", "2", "--subnets", "10"]) == 0
    out = capsys.readouterr().out
    assert "subnets/unit" in out and "subnets/s" not in out, out
    assert main(["plan", "--space", GOOD, "--devices", "2", "--subnets", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_unit"] == "unit"
    assert main(["plan", "--space", "digits-cnn", "--devices", "2", "--subnets", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_unit"] == "s"
