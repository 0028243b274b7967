"""``naspipe rank`` against run folders a user broke or mixed up: refused in one line (exit 2), never a traceback,
a hang or a number that means nothing. Against the shipped truth (data/truth/digits-truth) and a small reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from naspipe.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPACE = str(ROOT / "data" / "spaces" / "digits-truth.json")
TRUTH = ROOT / "data" / "truth" / "digits-truth"
COMMON = ["--space", SPACE, "--subnets", "12", "--optimizer", "momentum", "--shared-layers", "serial",
          "--no-progress"]


@pytest.fixture(scope="module")
def refs(tmp_path_factory) -> dict[str, Path]:
    """References of the truth's space: seeds 0 and 1 at lr 0.05, seeds 1 and 2 at lr 0.1."""
    d = tmp_path_factory.mktemp("refs")
    out = {}
    for name, extra in (("ref0", ["--lr", "0.05"]), ("ref1", ["--lr", "0.05", "--seed", "1"]),
                        ("lr1", ["--lr", "0.1", "--seed", "1"]), ("lr2", ["--lr", "0.1", "--seed", "2"])):
        out[name] = d / name
        assert main(["reference", *COMMON, *extra, "--out", str(out[name])]) == 0
    return out


def _refused(capsys, *args: object) -> str:
    capsys.readouterr()
    code = main(["rank", "--resamples", "50", *map(str, args)])
    c = capsys.readouterr()
    assert code == 2 and not c.out and len(c.err.strip().splitlines()) == 1, (code, c.out, c.err)
    return c.err


@pytest.mark.parametrize("text", ["{", "[]"])
def test_a_malformed_run_json_is_one_line_wherever_the_run_is_given(refs, tmp_path, capsys, text):
    """A run.json of ``{`` or ``[]`` was a 28-line traceback ending in RunFileError (verify said it in one line):
    as the run, as --against and as one of --seeds."""
    bad = tmp_path / "bad"
    shutil.copytree(refs["ref0"], bad)
    (bad / "run.json").write_text(text)
    for args in ((bad,), (refs["ref0"], "--against", bad), (refs["ref0"], "--seeds", refs["ref1"], bad)):
        err = _refused(capsys, *args, "--truth", TRUTH)
        assert f"{bad / 'run.json'}:" in err and ("not valid JSON" in err or "must be an object" in err), err


def _naspipe(args: list[str], tmp_path: Path, memory_kb: int | None = None) -> tuple[int, str, float]:
    """``naspipe ARGS`` in a fresh interpreter, killed after 60 s (a read that blocks must not hang the suite);
    ``memory_kb`` caps its address space (a read of /dev/zero is never tested without)."""
    import os
    import shlex
    import subprocess
    import sys
    import time

    cmd = shlex.join([sys.executable, "-c", "from naspipe.cli import entry; entry()", *args])
    if memory_kb is not None:
        cmd = f"ulimit -v {memory_kb}; exec {cmd}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    try:
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"naspipe {' '.join(args)} hung")
    return p.returncode, p.stderr, time.monotonic() - t0


def test_a_run_json_that_is_a_pipe_a_device_or_huge_is_one_line(refs, tmp_path, capsys):
    """A named pipe as run.json hung rank and verify (Path.read_text, no regular-file check), a link to /dev/zero
    grew memory without bound: each is refused in one line naming the file (naspipe.fileio.smallfile), as is a
    run.json larger than any run.json (a sparse file over the cap, not read)."""
    import os

    from naspipe.runfolder.runs import RUN_JSON_MAX_BYTES

    fifo = tmp_path / "fifo"
    shutil.copytree(refs["ref0"], fifo)
    (fifo / "run.json").unlink()
    os.mkfifo(fifo / "run.json")
    for args in (["rank", str(fifo), "--truth", str(TRUTH)], ["verify", str(refs["ref0"]), str(fifo)]):
        code, err, took = _naspipe(args, tmp_path)
        assert code == 2 and len(err.strip().splitlines()) == 1, (code, err)
        assert f"{fifo / 'run.json'}: a named pipe, not a file" in err and took < 30
    code, err, took = _naspipe(["reference", *COMMON, "--out", str(fifo)], tmp_path)  # (it hung too)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no valid run.json" in err and took < 30, err
    zero = tmp_path / "zero"
    shutil.copytree(refs["ref0"], zero)
    (zero / "run.json").unlink()
    (zero / "run.json").symlink_to("/dev/zero")
    code, err, _ = _naspipe(["verify", str(refs["ref0"]), str(zero)], tmp_path, memory_kb=2_000_000)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "a character device, not a file" in err, err
    huge = tmp_path / "huge"
    shutil.copytree(refs["ref0"], huge)
    with open(huge / "run.json", "r+b") as f:
        f.truncate(RUN_JSON_MAX_BYTES + 1)  # sparse: nothing written
    for args in ((huge,), (refs["ref0"], "--against", huge)):
        err = _refused(capsys, *args, "--truth", TRUTH)
        assert f"{RUN_JSON_MAX_BYTES + 1} bytes, more than the {RUN_JSON_MAX_BYTES} a run.json can be" in err
    assert main(["verify", str(refs["ref0"]), str(huge)]) == 2
    assert "a run.json can be" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["metrics.json", "params.json", "losses.csv"])
def test_the_other_run_files_verify_reads_are_no_pipes(refs, tmp_path, name):
    """metrics.json, params.json and losses.csv as named pipes: verify refuses each in one line."""
    import os

    d = tmp_path / "run"
    shutil.copytree(refs["ref0"], d)
    if name == "metrics.json":
        (d / "run.json").unlink()  # (verify reads metrics.json's config where there is no run.json)
    (d / name).unlink()
    os.mkfifo(d / name)
    code, err, _ = _naspipe(["verify", str(refs["ref1"]), str(d)], tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{d / name}: a named pipe, not a file" in err, err


def test_a_weights_file_that_is_a_pipe_is_one_line(refs, tmp_path):
    """weights.pt as a named pipe blocked torch.load (rank scores the run's weights): refused in one line."""
    import os

    d = tmp_path / "run"
    shutil.copytree(refs["ref0"], d)
    (d / "weights.pt").unlink()
    os.mkfifo(d / "weights.pt")
    code, err, took = _naspipe(["rank", str(d), "--truth", str(TRUTH)], tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{d / 'weights.pt'}: a named pipe" in err, err
    assert took < 30


def test_the_run_itself_or_a_copy_is_refused_as_against(refs, tmp_path, capsys):
    """``--against ref0`` of ref0 itself (or a link to it, or a copy) was ranked: run-to-run tau 1.00, a difference
    of 0.00 "within seed noise", which says nothing. Refused in one line; another run is compared."""
    ref0 = refs["ref0"]
    link = tmp_path / "link"
    link.symlink_to(ref0)
    copy = tmp_path / "copy"
    shutil.copytree(ref0, copy)
    for other, says in ((ref0, "is the run itself"), (link, "is the run itself"), (copy, "is the same run as")):
        err = _refused(capsys, ref0, "--truth", TRUTH, "--against", other)
        assert f"--against {other} {says}" in err and "compare another run" in err, err
    assert main(["rank", "--resamples", "50", str(ref0), "--truth", str(TRUTH), "--against", str(refs["ref1"])]) == 0
    assert "tau difference" in capsys.readouterr().out


def test_seed_runs_of_another_configuration_than_the_run_are_refused(refs, capsys):
    """``--seeds A B`` were checked against each other only: a seed band from supernets of another lr was applied
    to the run silently. Each seed run must equal the run but the seed (the field named)."""
    err = _refused(capsys, refs["ref0"], "--truth", TRUTH, "--seeds", refs["lr1"], refs["lr2"])
    assert f"--seeds {refs['lr1']} and the run {refs['ref0']} differ in more than the seed: lr 0.05 vs 0.1" in err
    err = _refused(capsys, refs["lr1"], "--truth", TRUTH, "--seeds", refs["lr2"], refs["ref0"])
    assert f"--seeds {refs['lr2']} and {refs['ref0']} differ in more than the seed: lr 0.1 vs 0.05" in err


@pytest.mark.parametrize("kwargs,says", [
    ({"run": None}, "run must be a run folder (a path), got NoneType None"),
    ({"run": 7}, "run must be a run folder (a path), got int 7"),
    ({"seeds": [1, 2]}, "seeds[0] must be a run folder (a path), got int 1"),
    ({"seeds": None}, "seeds must be a list of run folders, got NoneType None"),
    ({"against": 123}, "against must be a run folder (a path), got int 123"),
])
def test_the_python_api_names_the_argument_that_is_no_run_folder(kwargs, says):
    """``naspipe.rank(None, truth)``, ``seeds=[1, 2]`` and ``against=123`` were raw TypeErrors from pathlib."""
    import naspipe
    from naspipe.errors import UserError

    args = {"run": "somewhere", **kwargs}
    with pytest.raises(UserError) as e:
        naspipe.rank(args.pop("run"), TRUTH, **args)
    assert says in str(e.value)
