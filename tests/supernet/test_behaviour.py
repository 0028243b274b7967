"""A run's identity covers what its supernet computes (issue 40, item 6; ``naspipe.preflight.behaviour``).

The user's module here reads its activation from ``act.txt`` beside it, so switching relu -> gelu changes neither its
source, its structure nor its initial weights: only the behaviour digest sees it. Refused: a ``--resume`` after the
switch, a truth that continues after it, ``naspipe rank`` of a run trained after it against a truth built before;
``verify`` names it; a factory seeded from ``hash("x")`` (randomised per process) is refused before start, naming
its block. The cost of taking the digest at a run's start is printed (no wall-clock assertion).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from naspipe.cli import main

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

MODULE = '''
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import naspipe

ACT = getattr(F, (Path(__file__).parent / "act.txt").read_text().strip())  # what the source digest cannot see


def data(j, g):
    x = torch.randn(8, 8, generator=g)
    return x, (x.sum(1) > 0).long()


class Cell(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = nn.Linear(8, width)
        self.b = nn.Linear(width, 8)

    def forward(self, x):
        return self.b(ACT(self.a(x)))


def supernet():
    return naspipe.Supernet([naspipe.Choice("l0", {f"w{w}": (lambda w=w: Cell(w)) for w in (4, 8, 12, 16)}),
                             naspipe.Choice("l1", {f"v{w}": (lambda w=w: Cell(w)) for w in (4, 8, 12)}),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
                            data=data, loss=F.cross_entropy, batch_size=8)
'''

HASHED = '''
import torch
import torch.nn.functional as F
from torch import nn

import naspipe


def data(j, g):
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


def hashed():
    m = nn.Linear(8, 8)
    g = torch.Generator().manual_seed(hash("x") % 2**31)  # Python randomises str hashes per process
    with torch.no_grad():
        m.weight.copy_(torch.randn(8, 8, generator=g))
    return m


def supernet():
    return naspipe.Supernet([naspipe.Choice("plain", {"lin": lambda: nn.Linear(8, 8)}),
                             naspipe.Choice("seeded", {"hashed": hashed, "id": nn.Identity}),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
                            data=data, loss=F.cross_entropy, batch_size=4)
'''


def _module(folder: Path, name: str, act: str = "relu", text: str = MODULE) -> str:
    """Write the user's module ``name`` (and its ``act.txt``) in ``folder``; forget what this process imported of
    it, as a new process would. Returns its ``module:function``."""
    from naspipe.supernet import load

    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(text)
    (folder / "act.txt").write_text(act)
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    spec = f"{name}:supernet"
    load.forget(spec)
    return spec


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path / "user"))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'user'}:{__import__('os').environ.get('PYTHONPATH', '')}")
    return tmp_path / "user"


def _name(tmp_path: Path, stem: str) -> str:
    return f"{stem}_{tmp_path.name[-12:].replace('-', '_')}"


def _one_line(capsys) -> str:  # noqa: ANN001
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_a_resume_after_the_activation_changed_is_refused_before_start(user_dir, tmp_path, capsys):
    """relu -> gelu in the file the module reads: the same source, structure and weights; --resume is refused in
    one line naming the behaviour, before the run folder is touched (it used to resume with exit 0)."""
    spec = _module(user_dir, _name(tmp_path, "act"))
    out = tmp_path / "run"
    args = ["train", "--space", spec, "--stages", "2", "--subnets", "6", "--checkpoint-every", "2", "--no-progress"]
    assert main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    from naspipe.runtime.processes import launcher

    first = dict(launcher.last_behaviour)  # the first in this process also starts the fork server
    import naspipe
    from naspipe.preflight.behaviour import in_child

    warm = in_child(launcher.process_context("forkserver", "native"), naspipe.resolve_space(spec), "native",
                    weights=True)
    with capsys.disabled():  # what the digest adds to a run's start (printed: no wall-clock assertion)
        print(f"\nbehaviour digest at a run's start: {first['total_s']:.3f} s at this run (fork server started "
              f"with it, or warm), {warm['child_s']:.3f} s with the fork server warm, of which measuring "
              f"{warm['seconds']:.3f} s")
    ident = json.loads((out / "run.json").read_text())["identity"]
    assert len(ident["behaviour_sha256"]) == 64
    before = (out / "run.json").read_text()
    _module(user_dir, _name(tmp_path, "act"), act="gelu")
    assert main([*args, "--resume", str(out)]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"naspipe: error: checkpoint {str(out / 'checkpoint' / 'c000000004')!r} was taken with "
                          f"another behaviour of supernet {spec!r} (behaviour "), err
    assert "resume with the code of the interrupted run" in err, err
    assert (out / "run.json").read_text() == before  # refused before the folder was prepared


@pytest.mark.parametrize("command", ["train", "truth"])
def test_a_hash_initialised_factory_is_refused_before_start_naming_its_block(user_dir, tmp_path, capsys, command):
    """Weights drawn from a generator seeded with hash("x") pass the in-process "built twice" probe; another
    process builds others: refused before any stage or truth worker starts, naming the block (a truth's taken in a
    spawned interpreter)."""
    import os

    if os.environ.get("PYTHONHASHSEED", "random") != "random":
        pytest.skip("PYTHONHASHSEED fixes hash() in every process: the factory is not per-process here")
    spec = _module(user_dir, _name(tmp_path, "hashed"), text=HASHED)
    out = tmp_path / "run"
    extra = ["--stages", "2", "--subnets", "4"] if command == "train" else ["--steps", "2", "--workers", "2"]
    assert main([command, "--space", spec, *extra, "--no-progress", "--out", str(out)]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"naspipe: error: space {spec!r}: block 'seeded': the factory builds other initial "
                          "weights in another process under the same seed: it draws from per-process state "
                          "(hash() of a string"), err
    assert not (out / "losses.csv").exists() and not (out / "entries").exists()


def _truth(spec: str, out: Path, seeds: int) -> int:
    return main(["truth", "--space", spec, "--out", str(out), "--steps", "2", "--seeds", str(seeds),
                 "--no-progress", "--workers", "1"])


def test_a_truth_continued_and_a_run_ranked_after_the_activation_changed_are_refused(user_dir, tmp_path, capsys):
    """A truth built with relu: continuing it (more seeds) with gelu is refused naming the behaviour; a run trained
    with gelu is refused by ``naspipe rank`` against it; the truth continues with relu again."""
    name = _name(tmp_path, "truthact")
    spec = _module(user_dir, name)
    truth = tmp_path / "truth"
    assert _truth(spec, truth, 1) == 0, capsys.readouterr().err
    settings = json.loads((truth / "truth-settings.json").read_text())
    assert len(settings["behaviour_sha256"]) == 64
    _module(user_dir, name, act="gelu")
    capsys.readouterr()
    assert _truth(spec, truth, 2) == 2
    err = _one_line(capsys)
    assert err.startswith(f"naspipe: error: {truth} holds a truth of another behaviour of supernet {spec!r} "
                          "(behaviour "), err
    run = tmp_path / "run"
    assert main(["train", "--space", spec, "--stages", "1", "--subnets", "4", "--no-progress",
                 "--out", str(run)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["rank", str(run), "--truth", str(truth)]) == 2
    err = _one_line(capsys)
    assert f"{run} trained another behaviour of supernet {spec!r} than the truth was built with" in err, err


def test_verify_names_the_behaviour_of_two_references_that_differ_in_it(user_dir, tmp_path, capsys):
    name = _name(tmp_path, "verifyact")
    outs = []
    for act in ("relu", "gelu"):
        spec = _module(user_dir, name, act=act)
        out = tmp_path / act
        assert main(["reference", "--space", spec, "--subnets", "3", "--no-progress", "--out", str(out)]) == 0
        outs.append(out)
    capsys.readouterr()
    assert main(["verify", *map(str, outs)]) == 1
    text = capsys.readouterr()
    assert "the supernet's behaviour" in text.out + text.err, text
