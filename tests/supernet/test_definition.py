"""A run's identity covers its supernet's definition (``naspipe.supernet.definition``), not only its names.

Issue 28, part A: a ``--resume`` after an edit of the supernet's module (relu -> tanh, a shape change) is refused by
name before any process starts; ``verify`` of two definitions, of a non-causal policy against the reference, or of
factories that build other weights names the cause; a notebook's supernet has the same digest when its cell runs
again in another process; ``naspipe.train(supernet, out=...)`` takes the space positionally.
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import naspipe
from naspipe.cli import main
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.spaces.shared import parse_shared

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

MODULE = '''
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import naspipe


def data(j, g):
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


class _Proxy:  # a module global whose attributes raise (a lazy proxy): the source digest must not trip on it
    def __getattr__(self, name):
        raise RuntimeError(f"not loaded: {name}")


PROXY = _Proxy()


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, WIDTH)
        self.b = nn.Linear(WIDTH, 8)

    def forward(self, x):
        return self.b(torch.ACT(self.a(x)))


def scaled():
    m = nn.Linear(8, 8)
    with torch.no_grad():  # a pretrained-like start read from a file beside the module
        m.weight.mul_(json.loads((Path(__file__).parent / "scale.json").read_text()))
    return m


def supernet():
    return naspipe.Supernet([naspipe.Choice("l0", {"cell": Cell, "lin": lambda: nn.Linear(8, 8)}),
                             naspipe.Choice("l1", {"scaled": scaled, "id": nn.Identity}),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
                            data=data, loss=F.cross_entropy, batch_size=4)
'''


def _module(folder: Path, name: str, act: str = "relu", width: int = 8, scale: float = 1.0) -> str:
    """Write (or rewrite) the user's module ``name`` in ``folder``; forget what this process imported of it, as a
    new process would. Returns its ``module:function``."""
    from naspipe.supernet import load

    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(MODULE.replace("ACT", act).replace("WIDTH", str(width)))
    (folder / "scale.json").write_text(json.dumps(scale))
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    spec = f"{name}:supernet"
    load.forget(spec)  # (the module, its supernet and what this process recorded of its source)
    return spec


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path / "user"))
    return tmp_path / "user"


def test_forget_makes_the_next_load_import_the_module_as_it_is_now(user_dir):
    """``load.forget``: a module edited while the process runs (a notebook's kernel) is imported again, named by a
    spec or alone, with every supernet of it; without it the process goes on with the supernet it imported first."""
    from naspipe.supernet.load import forget, load_spec

    spec = _module(user_dir, "forgotten", act="relu")
    first, imported = load_spec(spec, probe=False), sys.modules["forgotten"]
    (user_dir / "forgotten.py").write_text(MODULE.replace("ACT", "tanh").replace("WIDTH", "8"))
    assert load_spec(spec, probe=False) is first  # (one import per process)
    forget(spec)
    second = load_spec(spec, probe=False)
    assert second is not first and sys.modules["forgotten"] is not imported
    assert "torch.tanh" in inspect.getsource(sys.modules["forgotten"].Cell.forward)
    third = load_spec(spec, probe=False)
    forget("forgotten")  # a module: each of its supernets
    assert "forgotten" not in sys.modules and load_spec(spec, probe=False) not in (first, second, third)
    (user_dir / "forgotten2.py").write_text(MODULE.replace("ACT", "relu").replace("WIDTH", "8"))
    other = load_spec("forgotten2:supernet", probe=False)
    forget("forgotten:supernet")  # (a name it is the prefix of is another module: kept)
    assert load_spec("forgotten2:supernet", probe=False) is other and "forgotten2" in sys.modules


def _run(*argv: object) -> list[str]:
    return [str(a) for a in argv] + ["--subnets", "6", "--no-progress"]


def test_a_resume_after_the_module_was_edited_is_refused_by_name_before_start(user_dir, tmp_path, capsys,
                                                                                monkeypatch):
    """Finding 1: relu -> tanh in the module, then --resume: refused (it used to continue: rc 0, a result that
    matched neither definition); a shape change too (it used to fail in the stages with a size mismatch)."""
    import naspipe.runtime.processes.launcher as launcher

    name = f"edited_{tmp_path.name[-12:].replace('-', '_')}"
    spec = _module(user_dir, name)
    out = tmp_path / "run"
    args = _run("train", "--space", spec, "--stages", "2", "--checkpoint-every", "2", "--start-method", "spawn")
    assert main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()

    def started(cfg):  # noqa: ANN001, ANN202
        raise RuntimeError(f"a run started (resumed at {cfg.start})")

    monkeypatch.setattr(launcher, "train", started)
    for act, width in (("tanh", 8), ("relu", 16)):
        _module(user_dir, name, act, width)
        assert main([*args, "--resume", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err, err
        assert err.startswith(f"naspipe: error: checkpoint {str(out / 'checkpoint' / 'c000000004')!r} was taken "
                              f"with another definition of supernet {spec!r}: its source differs (its code was "
                              "edited since); resume with the code of the interrupted run, or start a new run"), err
    _module(user_dir, name, scale=0.5)  # the same code, another start read from a file beside it
    assert main([*args, "--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"another definition of supernet {spec!r}: the initial weights or parameter shapes of block 'l1' differ " \
           "(another factory or init); resume with the code of the interrupted run" in err, err
    _module(user_dir, name)  # the interrupted run's code: accepted (and would start)
    with pytest.raises(RuntimeError, match="a run started \\(resumed at 4\\)"):
        main([*args, "--resume", str(out)])


def _reference(spec_or_sn: object, out: Path, n: int = 4) -> Path:
    sp = naspipe.resolve_space(spec_or_sn)
    ref = train_reference(sp, naspipe.UniformStream(sp, 0, n), 0, parse_shared("frozen"))
    ref.save(out, metrics={"config": ref.config})
    return out


def _verify(capsys, a: Path, b: Path) -> str:  # noqa: ANN001
    capsys.readouterr()
    rc = main(["verify", str(a), str(b)])
    out = capsys.readouterr().out.strip()
    assert rc == 1 and "\n" not in out, out
    return out


def test_verify_names_an_edited_module_and_the_blocks_whose_weights_differ(user_dir, tmp_path, capsys):
    """Finding 11: two definitions of one module:function used to give only 'differ: subnet 0'."""
    name = f"verified_{tmp_path.name[-12:].replace('-', '_')}"
    relu = _reference(_module(user_dir, name), tmp_path / "relu")
    tanh = _reference(_module(user_dir, name, "tanh"), tmp_path / "tanh")
    wide = _reference(_module(user_dir, name, width=16), tmp_path / "wide")
    scaled = _reference(_module(user_dir, name, scale=0.5), tmp_path / "scaled")  # the same code, other weights
    again = _reference(_module(user_dir, name), tmp_path / "again")
    assert main(["verify", str(relu), str(again)]) == 0, capsys.readouterr().out
    head = "differ: the runs were made with different configurations: "
    out = _verify(capsys, relu, tanh)
    assert out.startswith(f"{head}the supernet's source ") and "(its code was edited between the runs); " in out, out
    assert "initial weights" not in out, out  # relu -> tanh changes no weight
    out = _verify(capsys, relu, wide)
    assert "the supernet's source" in out and ", the initial weights or parameter shapes of block 'l0' differ " \
                                              "(another factory or init)" in out, out
    out = _verify(capsys, relu, scaled)
    assert out.startswith(f"{head}the initial weights or parameter shapes of block 'l1' differ (another factory "
                          "or init); first difference: subnet "), out


def _tiny(act, init=None) -> naspipe.Supernet:  # noqa: ANN001
    class B(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return act(self.a(x))

    def data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(4, 4, generator=g)
        return x, (x.sum(1) > 0).long()

    return naspipe.Supernet([naspipe.Choice("l0", {"x": B, "y": lambda: nn.Linear(4, 4)}),
                             naspipe.Fixed("head", lambda: nn.Linear(4, 2))], data=data, loss=F.cross_entropy,
                            batch_size=4, init=init)


def _zero_bias(mod: nn.Module, g: torch.Generator) -> None:
    for n, p in mod.named_parameters():
        if n.endswith("bias"):
            p.data.zero_()


def test_verify_names_notebook_definitions_that_differ_and_accepts_one_defined_twice(tmp_path, capsys):
    """A notebook's supernet: its cloudpickled definition, made canonical (a cell run twice is the same)."""
    a = _reference(_tiny(torch.relu), tmp_path / "a")
    assert main(["verify", str(a), str(_reference(_tiny(torch.relu), tmp_path / "a2"))]) == 0
    out = _verify(capsys, a, _reference(_tiny(torch.tanh), tmp_path / "b"))
    assert "the supernet's source" in out and "initial weights" not in out, out
    out = _verify(capsys, a, _reference(_tiny(torch.relu, _zero_bias), tmp_path / "c"))
    assert "the supernet's source" in out and "the initial weights or parameter shapes of blocks 'head', 'l0' " \
                                              "differ" in out, out


CELL = """
import sys
import torch
import torch.nn.functional as F
from torch import nn
import naspipe
from naspipe.supernet.definition import source_digest
{pad}
class B(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        return torch.{act}(self.a(x))

def data(j, g):
    x = torch.randn(4, 4, generator=g)
    return x, (x.sum(1) > 0).long()

sn = naspipe.Supernet([naspipe.Choice("l0", {{"x": B, "y": lambda: nn.Linear(4, 4)}}),
                       naspipe.Fixed("head", lambda: nn.Linear(4, 2))], data=data, loss=F.cross_entropy,
                      batch_size=4, costs={costs})
print(source_digest(sn, None))
"""


def test_a_notebook_cell_run_again_in_another_process_has_the_same_source_digest(tmp_path):
    """No false refusal: another file name, other line numbers, another hash seed, a profile, cloudpickle's
    per-process class ids: the same digest; another activation: another one."""
    import os

    def digest(folder: str, act: str = "relu", pad: str = "", costs: str = "None", seed: str = "0") -> str:
        d = tmp_path / folder
        d.mkdir(exist_ok=True)
        (d / "cell.py").write_text(CELL.format(act=act, pad=pad, costs=costs))
        root = str(Path(naspipe.__file__).parents[1])  # this naspipe, whatever the environment says
        env = {**os.environ, "PYTHONHASHSEED": seed,
               "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        done = subprocess.run([sys.executable, str(d / "cell.py")], capture_output=True, text=True, timeout=120,
                              env=env, check=True)
        return done.stdout.strip()

    first = digest("a")
    assert len(first) == 64
    assert digest("b", pad="\n\n# another cell above\n", seed="7", costs="{'candidates': {}}") == first
    assert digest("c", act="tanh") != first


def test_verify_names_a_policy_that_does_not_update_as_the_reference(tmp_path, capsys):
    """Finding 11: a pipedream run against the reference used to say only 'differ: subnet 1'."""
    spec = "user_supernets:good"
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(_run("reference", "--space", spec, "--out", str(ref))) == 0
    assert main(_run("train", "--space", spec, "--stages", "2", "--policy", "pipedream", "--out", str(run))) == 0, \
        capsys.readouterr().err
    out = _verify(capsys, run, ref)
    assert out.startswith("differ: the runs were made with different configurations: updates 'pipedream' vs "
                          "'exact' (policy 'pipedream' does not update exactly as the reference does: its numbers "
                          "differ by design)"), out
    assert json.loads((run / "run.json").read_text())["identity"]["updates"] == "pipedream"
    cfg = naspipe.TrainConfig.create(spec, tmp_path / "o", stages=2, subnets=4, policy="csp")
    # a causal policy verifies against the reference
    assert naspipe.runfolder.runs.train_identity(cfg)["updates"] == "exact"


def test_train_takes_the_space_positionally(tmp_path, monkeypatch):
    """Finding 9: naspipe.train(supernet, out=...) used to raise 'pass either a TrainConfig or keyword arguments'."""
    import naspipe.runtime.processes.launcher as launcher

    monkeypatch.setattr(launcher, "train", lambda cfg: cfg)
    sn = _tiny(torch.relu)
    cfg = naspipe.train(sn, out=tmp_path / "o", stages=2, subnets=4)
    assert isinstance(cfg, naspipe.TrainConfig) and cfg.space.name == "supernet" and cfg.stages == 2
    with pytest.raises(TypeError, match="got the space twice: a positional Supernet and space="):
        naspipe.train(sn, space=sn, out=tmp_path / "o")
    with pytest.raises(TypeError, match="not both \\(got a TrainConfig and out="):
        naspipe.train(cfg, out=tmp_path / "p")
