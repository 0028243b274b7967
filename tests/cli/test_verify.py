"""``naspipe verify`` (issue 13, holes 1 and 6): it compares configurations first and names the difference
(thread count, seed, optimizer, ...); duplicate, truncated or empty loss files and a params file with a name twice
are one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from naspipe.cli import main
from tests.helpers.refusals import refused

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def test_a_two_thread_run_verifies_against_a_two_thread_reference_only(two_thread_runs, capsys):
    r = two_thread_runs
    for name in ("train2", "ref2"):
        assert json.loads((r[name] / "run.json").read_text())["identity"]["threads"] == 2
    capsys.readouterr()
    assert main(["verify", str(r["train2"]), str(r["ref2"])]) == 0
    assert capsys.readouterr().out.startswith("identical: 8 subnets")
    assert main(["verify", str(r["train2"]), str(r["ref1"])]) == 1
    out = capsys.readouterr().out
    assert out.startswith("differ: the runs were made with different configurations: thread count 2 vs 1"), out


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


@pytest.mark.parametrize("key,value,words", [
    ("seed", 3, "seed 0 vs 3"),
    ("optimizer", "adam", "optimizer 'sgd' vs 'adam'"),
    ("lr", 0.1, "lr 0.2 vs 0.1"),
    ("shared_layers", "serial", "shared-layer policy 'frozen' vs 'serial'"),  # (a preset: auto is frozen)
    ("sequence_sha256", "f" * 64, "sequence digest"),
])
def test_verify_says_which_configuration_differs(two_thread_runs, tmp_path, capsys, key, value, words):
    a = _copy(two_thread_runs["ref1"], tmp_path / "a")
    b = _copy(two_thread_runs["ref1"], tmp_path / "b")
    data = json.loads((b / "run.json").read_text())
    data["identity"][key] = value
    (b / "run.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["verify", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"differ: the runs were made with different configurations: {words}"), out
    assert out.rstrip().endswith("their numbers agree nevertheless"), out


@pytest.mark.parametrize("text,message", [
    ("subnet,loss\n0,0x1.0p+0\n1,0x1.0p+0\n0,0x1.8p+0\n", "line 4: subnet 0 appears twice (first on line 2)"),
    ("subnet,loss\n0,0x1.0p+0\n1,0x1.0", "line 3 is truncated (no end of line): '1,0x1.0'"),
    ("subnet,loss\n", "holds no subnet (an empty run proves nothing)"),
    ("subnet,loss\n0,zero\n", "line 2 is not 'subnet,hex-float'"),
    (b"subnet,loss\n0,\xff\n", "not a UTF-8 text file (byte 14)"),
])
def test_verify_refuses_malformed_loss_files(tmp_path, capsys, text, message):
    runs = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "params.json").write_text("{}\n")
        runs.append(d)
    (runs[0] / "losses.csv").write_text("subnet,loss\n0,0x1.8p+0\n")
    p = runs[1] / "losses.csv"
    p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)
    err = refused(capsys, ["verify", str(runs[0]), str(runs[1])], message)
    assert str(p) in err


def test_verify_refuses_a_params_file_with_a_name_twice(tmp_path, capsys):
    d = tmp_path / "a"
    d.mkdir()
    (d / "losses.csv").write_text("subnet,loss\n0,0x1.8p+0\n")
    (d / "params.json").write_text('{"w": "1", "w": "2"}\n')
    refused(capsys, ["verify", str(d), str(d)], "params.json: key 'w' appears twice")
