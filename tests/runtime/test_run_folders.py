"""Run folders never lose a user's file (issue 28, items 2, 5, 9 and the disk part of 11), one test per case.

* A folder is a naspipe run only when its ``run.json`` says so: ``reference --out`` refuses a folder of the
  user's ``weights.pt`` or ``metrics.json``; ``--overwrite`` and a reference replacing its own run delete only
  the exact names a run writes (``weights-stage3.pt``, never ``weights-stage-best.pt``) and never an input
  (``--sequence DIR/sequence.json``); ``demo`` replaces only its own earlier runs.
* A run holds an exclusive lock on its folder: a second ``train --overwrite``, ``--resume`` or ``reference``
  into a folder whose run is still going is one line and exit 2 and changes nothing.
* A dangling ``--out`` link, a ``checkpoint`` link or a folder named ``weights-stage9.pt`` under ``--overwrite``
  are one line and exit 2, the link's target intact.
* A full disk (a real 200 KiB tmpfs) ends with one line naming the disk, never an empty ``status.json`` nor a
  stray temporary file; the one atomic writer (``naspipe.fileio.atomic``) leaves the old file on any failure.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runfolder import runs
from naspipe.runtime.rundir import ConfigError, prepare_out_dir
from tests.helpers.refusals import refused
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

TINY = ["--space", "tiny-transformer", "--subnets", "8", "--no-progress"]


def _refused(capsys, argv: list[str], message: str) -> str:
    """``naspipe ARGV`` exits 2 with one line holding ``message``."""
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("naspipe: error: ") and err.count("\n") == 1 and message in err, err
    return err


def _snapshot(d: Path) -> dict[str, object]:
    """Every entry under ``d``: a file's bytes, a link's target, or 'dir'."""
    out: dict[str, object] = {}
    for p in sorted(d.rglob("*")):
        key = str(p.relative_to(d))
        out[key] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


def _fake_run(d: Path, kind: str, *names: str) -> Path:
    """A folder that ``run.json`` marks as a naspipe run of ``kind``, holding ``names`` (files, 'x' each)."""
    d.mkdir(parents=True, exist_ok=True)
    runs.write_run(d, kind, {"space": "tiny-transformer"})
    for n in names:
        (d / n).write_text("x")
    return d


# ---- item 2: a folder is a run only when its run.json says so ---------------------------------------------
@pytest.mark.parametrize("name", ["weights.pt", "metrics.json"])
def test_reference_refuses_a_folder_of_user_files_that_is_not_a_run(tmp_path, capsys, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_bytes(b"the user's own")
    (out / "error-stage1.txt").write_text("the user's notes")
    before = _snapshot(out)
    _refused(capsys, ["reference", *TINY, "--out", str(out)],
             f"holds {name}, which no naspipe run wrote there (no valid run.json); choose another directory or "
             "pass --overwrite")
    assert _snapshot(out) == before


def test_reference_replacing_its_run_keeps_the_users_files_and_its_sequence_input(tmp_path, capsys):
    out = tmp_path / "ref"
    assert main(["reference", *TINY, "--sampler", "evolution:4", "--out", str(out)]) == 0
    sequence = (out / "sequence.json").read_bytes()
    notes = {"error-stage0.txt": "mine", "error-stage-notes.txt": "mine", "weights-stage-best.pt": "mine"}
    for name, text in notes.items():
        (out / name).write_text(text)
    # replay the sequence the first run generated, into the same folder (a reference replaces a reference)
    assert main(["reference", *TINY, "--sequence", str(out / "sequence.json"), "--out", str(out)]) == 0
    assert (out / "sequence.json").read_bytes() == sequence  # the input is never deleted
    assert {n: (out / n).read_text() for n in notes} == notes  # a reference writes no error-stage file
    assert json.loads((out / "metrics.json").read_text())["config"]["sequence"] == str(out / "sequence.json")


def test_overwrite_deletes_only_the_exact_names_a_run_writes(tmp_path):
    out = _fake_run(tmp_path / "run", "train", "losses.csv", "weights-stage0.pt", "weights-stage12.pt",
                    "params-stage1.json", "error-stage2.txt", "trace.json")
    (out / "checkpoint").mkdir()
    mine = ["weights-stage-best.pt", "params-stage2-old.json", "error-stage-notes.txt", "weights-stage0.pt.bak",
            "notes.txt", "weights.pt"]  # weights.pt: a train run never writes it
    for n in mine:
        (out / n).write_text("mine")
    prepare_out_dir(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == sorted([*mine, "checkpoint", "parts"])
    assert all((out / n).read_text() == "mine" for n in mine)


def test_train_into_a_folder_of_user_files_keeps_them(tmp_path, capsys):
    """No run.json and no run name there: the run writes beside the user's files and deletes none."""
    out = tmp_path / "mine"
    out.mkdir()
    mine = {"weights-stage-best.pt": "a", "params-stage2-old.json": "b", "error-stage-notes.txt": "c"}
    for name, text in mine.items():
        (out / name).write_text(text)
    assert main(["train", *TINY, "--stages", "2", "--out", str(out)]) == 0
    assert {n: (out / n).read_text() for n in mine} == mine
    assert (out / "weights-stage1.pt").is_file() and runs.kind_of(out) == "train"
    assert not (out / ".naspipe.lock").exists()  # released and removed when the run ended


def test_train_overwrite_refuses_to_delete_its_sequence_input(tmp_path, capsys):
    from naspipe.sequences.sequence import UniformStream, save_sequence
    from naspipe.spaces.space import preset

    out = _fake_run(tmp_path / "run", "train", "losses.csv")
    save_sequence(UniformStream(preset("tiny-transformer"), 0, 8), out / "sequence.json")
    before = _snapshot(out)
    _refused(capsys, ["train", *TINY, "--sequence", str(out / "sequence.json"), "--out", str(out), "--overwrite"],
             "is an input of this run and a file of the run in")
    assert _snapshot(out) == before


def test_demo_refuses_a_reference_run_in_its_csp_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    _fake_run(out / "csp", "reference", "losses.csv", "params.json", "notes.txt")
    before = _snapshot(out)
    _refused(capsys, ["demo", "--subnets", "4", "--stages", "2", "--out", str(out)],
             f"{str(out / 'csp')!r} holds a reference run; naspipe demo writes a train run there and replaces only "
             "its own: choose another --out")
    assert _snapshot(out) == before


def test_demo_refuses_a_train_run_in_its_reference_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    _fake_run(out / "reference", "train", "losses.csv", "status.json", "trace.json")
    before = _snapshot(out)
    _refused(capsys, ["demo", "--subnets", "4", "--stages", "2", "--out", str(out)],
             "holds a train run; naspipe demo writes a reference run there")
    assert _snapshot(out) == before


# ---- item 5: one writer per run folder ---------------------------------------------------------------------
def test_a_second_writer_into_a_running_folder_is_refused_and_changes_nothing(tmp_path, capsys):
    """The first run goes on in a thread of this process (the lock is per open file, so a second open here is
    refused as another process's would be): no second interpreter and fork server to start."""
    import psutil

    from naspipe.runtime import TrainConfig
    from naspipe.runtime.processes.launcher import TrainError
    from tests.helpers.processes import descendants, train_in_thread

    out = tmp_path / "run"
    cfg = TrainConfig.create("tiny-transformer", out, stages=2, subnets=2000, jitter_ms=40.0, progress=False)
    first, box = train_in_thread(cfg)  # a slow run: still going while the others try
    try:
        assert wait_until(lambda: (out / "parts").is_dir() and (out / "run.json").is_file(), 180, every_s=0.2,
                          unless=lambda: not first.is_alive()), f"the first run ended or never started {box}"
        held = f"output directory {str(out)!r} is in use by another naspipe run (process {os.getpid()})"
        _refused(capsys, ["train", *TINY, "--stages", "2", "--out", str(out), "--overwrite"], held)
        _refused(capsys, ["reference", *TINY, "--out", str(out), "--overwrite"], held)
        assert first.is_alive(), "the first run must still be going (else the test proves nothing)"
        assert not (out / "status.json").exists()  # nobody wrote the first run's status
        assert runs.read_run(out)["identity"]["subnets"] == 2000  # nor its run.json
    finally:  # end the first run: its stages killed (once started), it fails as such a run does
        wait_until(lambda: len(descendants(psutil.Process())) >= 2, 120, every_s=0.1,
                   unless=lambda: not first.is_alive())
        for p in descendants(psutil.Process()):
            p.kill()
        first.join(60)
    assert not first.is_alive() and isinstance(box.get("error"), TrainError), box


def test_a_resume_into_a_folder_another_process_holds_is_refused(tmp_path, capsys):
    from naspipe.runfolder.runlock import locked

    out = tmp_path / "run"
    common = [*TINY, "--stages", "2", "--checkpoint-every", "2"]
    assert main(["train", *common, "--out", str(out), "--fault", "kill:1:5"]) == 1
    status = (out / "status.json").read_bytes()
    assert json.loads(status)["checkpoint"] >= 2
    with locked(out):  # as a run resuming there would hold it
        before = _snapshot(out)
        _refused(capsys, ["train", *common, "--resume", str(out)],
                 f"output directory {str(out)!r} is in use by another naspipe run (process {os.getpid()})")
        assert _snapshot(out) == before
    assert main(["train", *common, "--resume", str(out)]) == 0  # once free, the resume goes ahead


def test_the_lock_is_released_when_a_run_ends(tmp_path, capsys):
    """A finished (or refused) run leaves no lock behind: the next run into the folder goes ahead."""
    from naspipe.runfolder.runlock import RunLocked, acquire, locked, release

    out = tmp_path / "run"
    with locked(out):
        with pytest.raises(RunLocked, match="in use by another naspipe run"):
            acquire(out)
    assert not (out / ".naspipe.lock").exists()
    release(out, acquire(out))
    assert main(["reference", *TINY, "--out", str(out)]) == 0
    assert not (out / ".naspipe.lock").exists()


# ---- item 9: paths -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "reference"])
def test_an_out_that_is_a_dangling_link_is_one_line(tmp_path, capsys, command):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing")
    _refused(capsys, [command, *TINY, "--out", str(link)],
             f"output directory {str(link)!r} is a symbolic link to {str(tmp_path / 'missing')!r}, which does not "
             "exist; create the target or choose another directory")
    assert link.is_symlink() and not (tmp_path / "missing").exists()


def test_a_demo_out_that_is_a_dangling_link_is_one_line(tmp_path, capsys):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing")
    _refused(capsys, ["demo", "--subnets", "4", "--stages", "2", "--out", str(link)],
             f"cannot be created: {str(link)!r} is a symbolic link to {str(tmp_path / 'missing')!r}, which does not "
             "exist")
    assert link.is_symlink() and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("command", ["train", "reference"])
def test_overwrite_with_a_checkpoint_link_is_one_line_and_keeps_the_target(tmp_path, capsys, command):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious.pt").write_text("keep")
    out = _fake_run(tmp_path / "run", "train", "losses.csv")
    (out / "checkpoint").symlink_to(target)
    before = _snapshot(tmp_path)
    _refused(capsys, [command, *TINY, "--out", str(out), "--overwrite"],
             f"{str(out / 'checkpoint')!r} is a symbolic link (to {str(target)!r}); move it out of {str(out)!r}")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", ["train", "reference"])
def test_a_folder_under_a_run_file_name_is_one_line(tmp_path, capsys, command):
    out = _fake_run(tmp_path / "run", "train", "losses.csv")
    (out / "weights-stage9.pt").mkdir()
    (out / "weights-stage9.pt" / "mine.txt").write_text("keep")
    before = _snapshot(out)
    _refused(capsys, [command, *TINY, "--out", str(out), "--overwrite"],
             f"{str(out / 'weights-stage9.pt')!r} is a folder, where a naspipe run writes a file of that name")
    assert _snapshot(out) == before
    with pytest.raises(ConfigError, match="is a folder"):
        prepare_out_dir(out, overwrite=True)


# ---- item 11: a full disk ------------------------------------------------------------------------------------
@pytest.fixture
def full_disk(tmp_path):
    """A real 200 KiB tmpfs (needs root and mount(8)): a run's weights do not fit on it."""
    d = tmp_path / "tiny-disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a 200k tmpfs on {d} (this test needs root): {r.stderr.strip()}")
    try:
        yield d
    finally:  # lazily if a failed run still holds a file there (it is freed when that file is closed)
        if subprocess.run(["umount", str(d)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(d)], check=True)


@pytest.mark.parametrize("command", ["train", "reference"])
def test_a_full_disk_is_one_line_naming_it_with_no_empty_status_nor_temporary_file(full_disk, capsys, command):
    out = full_disk / "run"
    capsys.readouterr()
    assert main([command, *TINY, "--stages", "2", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("naspipe: error: ") and err.count("\n") == 1, err
    assert f"the disk holding {str(out)!r} is full (No space left on device" in err, err
    assert not [p.name for p in full_disk.rglob("*") if ".tmp" in p.name]
    if command == "train":  # written in full (there was room for it once the weights' temporary file went)
        assert json.loads((out / "status.json").read_text())["complete"] is False


def test_the_atomic_writer_keeps_the_old_file_and_no_temporary_on_a_full_disk(tmp_path, monkeypatch):
    from naspipe.fileio import atomic

    p = tmp_path / "status.json"
    p.write_text('{"complete": true}\n')

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as e:
        atomic.write_text_atomic(p, '{"complete": false}\n')
    assert atomic.is_disk_full(e.value)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["status.json"]
    assert p.read_text() == '{"complete": true}\n'


def test_there_is_one_atomic_writer():
    """The weights, the stages' parts, checkpoints and the status all go through ``naspipe.fileio.atomic``."""
    root = Path(__file__).resolve().parents[2] / "naspipe"
    writers = [str(p.relative_to(root)) for p in root.rglob("*.py") if "os.replace(" in p.read_text()]
    assert writers == ["fileio/atomic.py"], writers


def test_a_train_job_with_overwrite_leaves_a_running_runs_status_alone(monkeypatch, tmp_path):
    """The notebooks' ``TrainJob`` clears an earlier run's events and status, never those of a run still going."""
    from types import SimpleNamespace

    import naspipe.runtime as rt
    from naspipe.experiments.jobs import TrainJob
    from naspipe.runfolder.runlock import locked

    monkeypatch.setattr(rt, "train", lambda cfg: "trained")
    out = _fake_run(tmp_path / "run", "train", "status.json", "events.jsonl")
    with locked(out):  # another run is writing there
        TrainJob(SimpleNamespace(out=out, overwrite=True)).start().wait(5)
        assert (out / "status.json").is_file() and (out / "events.jsonl").is_file()
    TrainJob(SimpleNamespace(out=out, overwrite=True)).start().wait(5)  # once it ended: cleared
    assert not (out / "status.json").exists() and not (out / "events.jsonl").exists()


def test_write_reference_refuses_a_train_run_before_training(monkeypatch, tmp_path):
    from naspipe.experiments.jobs import write_reference
    from naspipe.runtime import TrainConfig

    out = _fake_run(tmp_path / "run", "train", "losses.csv", "status.json")
    before = _snapshot(out)
    cfg = TrainConfig.create("tiny-transformer", tmp_path / "unused", subnets=4, progress=False)
    with pytest.raises(ConfigError, match="holds a train run"):
        write_reference(cfg, out)
    assert _snapshot(out) == before


# issue 13, hole 5: run kinds
def test_reference_refuses_a_train_run_and_overwrite_clears_it(two_thread_runs, tmp_path, capsys):
    run = Path(shutil.copytree(two_thread_runs["train2"], tmp_path / "run"))
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    refused(capsys, ["reference", *TINY, "--out", str(run)],
             f"output directory {str(run)!r} holds a train run (losses.csv); choose another directory or pass "
             "--overwrite (which clears it first)")
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before
    assert main(["reference", *TINY, "--out", str(run), "--overwrite"]) == 0
    assert json.loads((run / "run.json").read_text())["kind"] == "reference"
    left = {p.name for p in run.iterdir()}
    assert not left & {"trace.json", "events.jsonl", "parts", "weights-stage0.pt"}, left
    assert json.loads((run / "status.json").read_text()) == {"complete": True}  # the reference's own now
    # and a train run refuses the reference's folder
    refused(capsys, ["train", *TINY, "--out", str(run)], "holds a reference run (losses.csv)")
