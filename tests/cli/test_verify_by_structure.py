"""Issue 27, item 3: runs are the same space when their structure agrees, whatever each calls it.

A supernet written in a module file and trained by ``naspipe reference --space mod:supernet`` (name
``mod:supernet``) and the same definition pasted into a script's ``__main__`` and trained from Python with
``naspipe.train`` (name ``cellnet``, shipped by value) verify identical; ``naspipe.reference(...)`` from Python
writes the same reference the command does; a renamed space with other weights or other subnets is still told
apart; and a name holding ``:`` is accepted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import naspipe
from naspipe.cli import main
from naspipe.runfolder import runs
from tests.helpers.fresh_command import run_fresh

REPO = Path(__file__).resolve().parents[2]

DEFINITION = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from torch import nn

    import naspipe


    class Res(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.up, self.down = nn.Linear(8, hidden), nn.Linear(hidden, 8)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))


    def data(j, g):
        x = torch.randn(16, 5, generator=g)
        return x, (x[:, 0] + x[:, 1] > 0).long()


    def supernet(name=None):
        cands = {"h4": lambda: Res(4), "h12": lambda: Res(12)}
        return naspipe.Supernet(
            [naspipe.Fixed("stem", lambda: nn.Linear(5, 8)),
             *[naspipe.Choice(f"b{i}", cands) for i in range(3)],
             naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
            data=data, loss=F.cross_entropy, batch_size=16, name=name)
''')

SCRIPT = DEFINITION + textwrap.dedent('''

    if __name__ == "__main__":
        import sys

        torch.set_num_threads(1)
        run, api_ref = sys.argv[1], sys.argv[2]
        sn = supernet("cellnet")  # defined here, in __main__: shipped to the stages by value
        naspipe.train(sn, out=run, stages=2, subnets=12, seed=3, progress=False)
        naspipe.reference(sn, api_ref, subnets=12, seed=3)
''')


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))


@pytest.mark.usefixtures("no_process_left_behind")
def test_a_main_supernet_trained_from_python_verifies_against_the_commands_reference_of_its_module(
        tmp_path, monkeypatch, capsys):
    (tmp_path / "cellmod.py").write_text(DEFINITION)
    (tmp_path / "train_main.py").write_text(SCRIPT)
    # the command's reference and verify run in this process (cellmod found on sys.path, as on PYTHONPATH);
    # the script, whose __main__ supernet is the point, runs in a fresh interpreter
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cellmod", raising=False)
    assert main(["reference", "--space", "cellmod:supernet", "--subnets", "12", "--seed", "3", "--out", "ref",
                 "--no-progress"]) == 0
    script = subprocess.run([sys.executable, "train_main.py", "run", "api_ref"], env=_env(tmp_path),
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    a, b = runs.read_run(tmp_path / "run")["identity"], runs.read_run(tmp_path / "ref")["identity"]
    assert (a["space"], b["space"]) == ("cellnet", "cellmod:supernet")  # two names, one structure
    assert a["structure_sha256"] == b["structure_sha256"] and a["subnets_sha256"] == b["subnets_sha256"]
    for other in ("ref", "api_ref"):
        capsys.readouterr()
        rc = main(["verify", "run", other])
        out = capsys.readouterr()
        assert rc == 0, out.out + out.err
        assert "identical" in out.out
    assert runs.read_run(tmp_path / "api_ref")["kind"] == "reference"  # naspipe.reference wrote what the command does
    files = [sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("api_ref", "ref")]
    assert files[0] == files[1]


def _ident(**over):
    base = {"space": "cellnet", "space_sha256": "a" * 64, "structure_sha256": "s" * 64, "source_sha256": "x" * 64,
            "weights_sha256": {"stem": "1", "b0": "2"}, "sequence_sha256": "q" * 64, "subnets_sha256": "n" * 64,
            "seed": 3, "subnets": 12, "optimizer": "sgd", "lr": 0.05, "threads": 1, "shared_layers": "serial",
            "updates": "exact", "replicas": 1}
    return {**base, **over}


def test_a_renamed_space_is_the_same_space_but_its_weights_and_subnets_are_still_compared():
    renamed = _ident(space="cellmod:supernet", space_sha256="b" * 64, source_sha256="y" * 64, sequence_sha256="r" * 64)
    assert runs.differences(_ident(), renamed) == []
    diffs = runs.differences(_ident(), {**renamed, "weights_sha256": {"stem": "9", "b0": "2"}, "seed": 4,
                                        "subnets_sha256": "m" * 64})
    assert [k for k, _, _ in diffs] == ["weights_sha256", "seed", "subnets_sha256"]
    assert "'stem'" in runs.describe_differences(diffs)
    other = runs.differences(_ident(), {**renamed, "structure_sha256": "t" * 64})  # another structure
    assert [k for k, _, _ in other][:1] == ["space"]
    old = {k: v for k, v in renamed.items() if k not in ("structure_sha256", "subnets_sha256")}  # runs before it
    assert [k for k, _, _ in runs.differences(_ident(), old)][:1] == ["space"]


def test_the_structure_digest_ignores_the_name_and_where_the_supernet_lives(tmp_path, monkeypatch):
    (tmp_path / "cellmod2.py").write_text(DEFINITION)
    monkeypatch.syspath_prepend(str(tmp_path))
    import cellmod2

    by_name = naspipe.resolve_space(cellmod2.supernet("cellmod2:supernet"))  # a name with ':' is legitimate
    by_spec = naspipe.resolve_space("cellmod2:supernet")
    assert by_name.name == by_spec.name == "cellmod2:supernet"
    assert by_name.structure_digest() == by_spec.structure_digest() == \
        naspipe.resolve_space(cellmod2.supernet("another")).structure_digest()
    assert by_name.digest() != naspipe.resolve_space(cellmod2.supernet("another")).digest()


def test_naspipe_reference_refuses_bad_input_in_one_line(tmp_path):
    with pytest.raises(naspipe.RunSpecError, match="shared"):
        naspipe.reference("tiny-transformer", tmp_path / "r", subnets=2, shared_layers="sometimes")
    with pytest.raises(TypeError, match="stagez"):
        naspipe.reference("tiny-transformer", tmp_path / "r", stagez=2)


def test_verify_needs_no_torch(tmp_path):
    """Comparing two runs reads CSV and JSON: ``naspipe verify`` answers in a fraction of a second, without the
    seconds of a torch import."""
    from naspipe.runfolder.results import write_losses, write_params

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_losses(tmp_path / name / "losses.csv", {0: 0.5, 1: 0.25})
        write_params(tmp_path / name / "params.json", {"w": "00"})
    r = run_fresh(["verify", "a", "b"], tmp_path)
    assert r.stdout.strip() == "identical: 2 subnets, 1 tensors", r.stderr[-2000:]
    assert r.code == 0 and not r.imported_torch
