"""Your own supernet: the declaration API, ``--space module:function``, refusal of bad user code, weights.

The user's modules live outside the package (``tests/helpers/user_supernets.py``, ``data/supernets/``) and are found
on ``PYTHONPATH`` as a new user's would be. Multi-process acceptance runs are in ``tests/supernet/test_runs.py``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import naspipe
from naspipe.cli import main
from naspipe.models import build_stage, heldout_batches, make_batch
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SpaceError as SpaceErr

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

GOOD = "user_supernets:good"


def test_a_module_function_resolves_to_a_space_named_by_the_spec():
    sp = naspipe.resolve_space(GOOD)
    assert sp.name == GOOD and sp.num_blocks == 6 and sp.fixed_blocks == (0, 5)
    assert [c.name for c in sp.blocks[1].candidates] == ["h8", "h16", "h24"]
    assert dict(sp.model) == {"kind": "supernet", "source": GOOD} and not sp.model.profiled


def test_subnets_are_label_dicts_at_the_boundary():
    sp = naspipe.resolve_space(GOOD)
    d = naspipe.subnet_dict(sp, (0, 2, 0, 1, 2, 0))
    assert d == {"b0": "h24", "b1": "h8", "b2": "h16", "b3": "h24"}
    assert naspipe.subnet_tuple(sp, d) == (0, 2, 0, 1, 2, 0)
    with pytest.raises(naspipe.SpaceError, match="block 'b1' has no candidate 'h9'"):
        naspipe.subnet_tuple(sp, {**d, "b1": "h9"})
    with pytest.raises(naspipe.SpaceError, match="subnet lacks block 'b3'"):
        naspipe.subnet_tuple(sp, {k: v for k, v in d.items() if k != "b3"})


def test_preset_subnets_convert_too():
    sp = naspipe.preset("digits-cnn")
    sub = naspipe.UniformStream(sp, 0, 1)[0]
    d = sp.subnet_dict(sub)
    assert list(d) == [f"cell{i}" for i in range(6)] and sp.subnet_from_dict(d) == sub
    assert naspipe.ReplayStream(sp, [d, list(sub)])[0] == sub


def test_weights_depend_on_seed_block_and_candidate_alone():
    """Any partition builds the same tensors (the factory runs under a seeded random state), another seed others."""
    sp = naspipe.resolve_space(GOOD)
    whole = build_stage(sp, range(6), 7, SharedLayers()).global_named_parameters()
    parts = {}
    for blocks in (range(0, 2), range(2, 5), range(5, 6)):
        parts.update(build_stage(sp, blocks, 7, SharedLayers()).global_named_parameters())
    assert whole.keys() == parts.keys()
    assert all(torch.equal(whole[k], parts[k]) for k in whole)
    other = build_stage(sp, range(6), 8, SharedLayers()).global_named_parameters()
    assert not torch.equal(whole["b1.h8.up.weight"], other["b1.h8.up.weight"])
    # the user's own default initialisation, not naspipe's: a Linear's bias is not zero
    assert whole["b1.h8.up.bias"].abs().sum() > 0
    # building does not disturb the caller's random state
    torch.manual_seed(0)
    a = torch.rand(3)
    torch.manual_seed(0)
    build_stage(sp, range(6), 7, SharedLayers())
    assert torch.equal(torch.rand(3), a)


def test_batches_come_from_the_seeded_generator_and_a_dataset_works_too():
    sp = naspipe.resolve_space(GOOD)
    a, b = make_batch(sp, 0, 3), make_batch(sp, 0, 3)
    assert torch.equal(a.input, b.input) and not torch.equal(a.input, make_batch(sp, 0, 4).input)
    assert not torch.equal(a.input, make_batch(sp, 1, 3).input)
    ds = torch.utils.data.TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20) % 2)
    sn = naspipe.Supernet([naspipe.Fixed("lin", lambda: nn.Linear(2, 2))], data=ds,
                          loss=nn.functional.cross_entropy, batch_size=4, heldout=ds, heldout_batches=5)
    sp2 = naspipe.resolve_space(sn)
    x, y = make_batch(sp2, 0, 0)
    assert x.shape == (4, 2) and torch.equal(x[:, 0] / 2 % 2, y.float())
    assert torch.equal(make_batch(sp2, 0, 0).input, x)
    held = heldout_batches(sp2)
    assert len(held) == 5 and torch.equal(held[0].input, ds.tensors[0][:4])


BAD = [
    ("factory_raises", "block 'b2', candidate 'broken': the factory raised RuntimeError: out of ideas"),
    ("shape_mismatch", "block 'b1': candidates 'h8' and 'wide' give outputs (16, 12)"),
    ("loss_not_scalar", "loss must return a scalar float tensor, got (16,)"),
    ("data_random", "data is not deterministic: batch 0 drawn twice differs"),
    ("duplicate_labels", "duplicate label 'b0'"),
    ("duplicate_candidates", "block 'b0': duplicate candidate name 'h8'"),
    ("bad_label", "label 'in.put' cannot name a torch module"),
    ("empty_choice", "block 'b3': a Choice needs at least one candidate"),
    ("attribute_label", "block 'b1': candidate 'add_module' cannot name a torch module: it is an attribute of"),
    ("not_a_supernet", "not_a_supernet() returned dict, not a naspipe.Supernet"),
]


@pytest.mark.parametrize("command", ["train", "reference"])
@pytest.mark.parametrize(("function", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_user_code_is_one_line_exit_2_and_starts_nothing(tmp_path, capsys, command, function, message):
    out = tmp_path / "out"
    rc = main([command, "--space", f"user_supernets:{function}", "--stages", "2", "--subnets", "4",
               "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith(f"naspipe: error: --space user_supernets:{function}: ") and "\n" not in err, err
    assert message in err, err
    assert not out.exists()


def test_a_module_that_does_not_import_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_user_module.py").write_text("import torch\nraise ImportError('needs a GPU library')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec, message in (("no_such_module_xyz:supernet", "module 'no_such_module_xyz' does not import "
                                                          "(ModuleNotFoundError"),
                          ("broken_user_module:supernet", "module 'broken_user_module' does not import "
                                                          "(ImportError: needs a GPU library); is its folder on "
                                                          "PYTHONPATH?"),
                          ("user_supernets:nothing_here", "module 'user_supernets' has no function 'nothing_here'")):
        for command in (["train", "--out", str(tmp_path / "o")], ["simulate"], ["profile"]):
            rc = main([command[0], "--space", spec, *command[1:]])
            err = capsys.readouterr().err.strip()
            assert rc == 2 and "\n" not in err and message in err, (command, err)
    assert not (tmp_path / "o").exists()


def test_a_notebook_supernet_that_cannot_be_pickled_is_refused_before_start(tmp_path):
    import threading

    lock = threading.Lock()

    def data(j, g):
        with lock:
            x = torch.randn(4, 3, generator=g)
        return x, (x[:, 0] > 0).long()

    sn = naspipe.Supernet([naspipe.Fixed("a", lambda: nn.Linear(3, 3)),
                           naspipe.Choice("b", {"x": lambda: nn.Linear(3, 2)})], data=data,
                          loss=nn.functional.cross_entropy, batch_size=4, name="locked")
    with pytest.raises(naspipe.runtime.ConfigError) as e:
        naspipe.TrainConfig.create(sn, tmp_path / "o", stages=2, subnets=4)
    msg = str(e.value)
    assert "\n" not in msg and "supernet 'locked' cannot be shipped to the stage processes (cloudpickle: " in msg
    assert "lock" in msg and "module:function" in msg
    assert not (tmp_path / "o").exists()


def test_measured_costs_become_the_space_costs(tmp_path, capsys):
    from naspipe.supernet import load_spec

    sn = load_spec(GOOD)
    costs = naspipe.measure_costs(sn, repeats=1)
    assert set(costs["candidates"]) == {"inp", "b0", "b1", "b2", "b3", "out"}
    h8 = costs["candidates"]["b0"]["h8"]
    assert h8["param_bytes"] == (12 * 8 + 8 + 8 * 12 + 12) * 4 and h8["act_bytes"] > 0 and h8["fwd"] > 0
    assert costs["message_bytes"] == 12 * 4
    sp = naspipe.resolve_space(sn.with_costs(costs))
    assert sp.model.profiled and sp.blocks[1].candidates[0].fwd == h8["fwd"]
    assert sp.message_bytes == 48
    # the CLI: unit costs are named, a profile file is read back by Supernet(costs=path)
    assert main(["simulate", "--space", GOOD, "--stages", "2", "--subnets", "10"]) == 0
    assert "unit costs; measure them with naspipe profile --space user_supernets:good" in capsys.readouterr().err
    out = tmp_path / "p.json"
    assert main(["profile", "--space", GOOD, "--repeats", "1", "--out", str(out)]) == 0
    sp2 = naspipe.resolve_space(sn.with_costs(str(out)))
    assert sp2.model.profiled and sp2.blocks[1].candidates[0].param_bytes == h8["param_bytes"]
    if not torch.cuda.is_available():
        assert main(["profile", "--space", GOOD, "--device", "cuda", "--out", str(out)]) == 2
        assert "no CUDA device" in capsys.readouterr().err


def test_declaration_errors_raise_at_once_in_python():
    lin = lambda: nn.Linear(2, 2)  # noqa: E731
    with pytest.raises(SpaceErr, match="block 'c': a Choice needs at least one candidate"):
        naspipe.Choice("c", {})
    with pytest.raises(SpaceErr, match="label 'a.b' cannot name a torch module"):
        naspipe.Fixed("a.b", lin)
    with pytest.raises(SpaceErr, match="block 'c', candidate 'x': the factory must be a zero-argument callable"):
        naspipe.Choice("c", {"x": nn.Linear(2, 2)})
    with pytest.raises(SpaceErr, match="name 'digits-cnn' is a preset's"):
        naspipe.Supernet([naspipe.Fixed("a", lin)], data=lambda j, g: None, loss=lambda o, t: o, batch_size=2,
                         name="digits-cnn")
    with pytest.raises(SpaceErr, match="batch_size must be a whole number >= 1"):
        naspipe.Supernet([naspipe.Fixed("a", lin)], data=lambda j, g: None, loss=lambda o, t: o, batch_size=0)


def test_profile_of_a_preset_needs_an_out_file(tmp_path, capsys):
    assert main(["profile", "--space", "digits-cnn"]) == 2
    assert "--out is needed" in capsys.readouterr().err
    assert main(["profile", "--space", "naspipe-k12", "--out", str(tmp_path / "p.json")]) == 2
    assert "no torch model" in capsys.readouterr().err
    out = str(tmp_path / "p.json")
    assert main(["profile", "--space", "digits-cnn", "--repeats", "1", "--out", out, "--json"]) == 0
    assert '"cell0"' in capsys.readouterr().out


def test_seeded_builds_in_two_threads_do_not_interleave():
    """A reference trained in a notebook's background thread builds its candidates while the launcher checks
    the model in the foreground; torch's random state is one per process, so seeded builds must not interleave
    (they did: the notebook's reference differed from the run)."""
    import threading
    import time

    from naspipe.models.user import build_candidate

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(torch.rand(4))
            time.sleep(0.2)  # the other thread seeds the global state meanwhile, unless builds are serialised
            self.b = nn.Parameter(torch.rand(4))

    sn = naspipe.Supernet([naspipe.Choice("c", {"slow": Slow, "fast": lambda: nn.Linear(4, 4)})],
                          data=lambda j, g: (torch.rand(2, 4, generator=g), torch.rand(2, 4, generator=g)),
                          loss=torch.nn.functional.mse_loss, batch_size=2)
    alone = {seed: build_candidate(sn, 0, 0, seed=seed) for seed in (3, 7)}
    built = {}
    t = threading.Thread(target=lambda: built.setdefault(3, build_candidate(sn, 0, 0, seed=3)))
    main_build = threading.Timer(0.0, lambda: built.setdefault(7, build_candidate(sn, 0, 0, seed=7)))
    main_build.start()
    time.sleep(0.05)  # both builds overlap in time
    t.start()
    t.join(timeout=30)
    main_build.join(timeout=30)
    for seed in (3, 7):
        assert torch.equal(built[seed].a, alone[seed].a) and torch.equal(built[seed].b, alone[seed].b), seed
