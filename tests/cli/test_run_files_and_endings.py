"""Three holes left in issue 28's run-folder and run-ending promises, one test each (each failed before its fix).

* ``naspipe demo`` (what ``make demo`` runs) wrote ``summary.json``, ``gantt.html`` and ``report.html`` over a
  user's files of those names: it now writes them only into its CSP run folder (marked by ``run.json``) and
  refuses, one line and exit 2 before any process starts, a folder where such a file is not its own;
* ``naspipe reference`` ignored SIGTERM's promise (killed outright: no ``status.json``, rc -15) and wrote no
  ``status.json`` on Ctrl-C either: both now write it, exit 143 or 130, and leave no process;
* a failed merge of the stages' ``parts/`` (a corrupt part file) printed a traceback: now one line naming the
  file, saying that every stage finished and that the parts are kept, and ``status.json`` says the same.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from naspipe.cli import main
from naspipe.runfolder import runs
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

BIN = Path(sys.executable).parent
TESTS = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    """This environment as it is when a test runs (its TMPDIR is the session's: tests/conftest.py), for a
    command in a process of its own."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"},
            "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS / "helpers")])}


def _snapshot(d: Path) -> dict[str, object]:
    """Every entry under ``d``: a file's bytes, a link's target, or 'dir'."""
    out: dict[str, object] = {}
    for p in sorted(d.rglob("*")):
        key = str(p.relative_to(d))
        out[key] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


def _one_line_exit_2(capsys, argv: list[str], message: str) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("naspipe: error: ") and err.count("\n") == 1 and message in err, err
    return err


# ---- 1: the demo writes its own files only ------------------------------------------------------------------
DEMO = ["demo", "--subnets", "4", "--stages", "2"]


@pytest.mark.parametrize("name", ["csp/summary.json", "csp/report.html", "csp/gantt.html"])
def test_the_demo_refuses_a_folder_holding_a_users_file_it_would_write(tmp_path, capsys, name):
    out = tmp_path / "demo"
    mine = out / name
    mine.parent.mkdir(parents=True)
    mine.write_text("my own notes\n")
    before = _snapshot(out)
    _one_line_exit_2(capsys, [*DEMO, "--out", str(out)], "which naspipe demo did not write")
    assert _snapshot(out) == before


def test_the_demo_refuses_a_link_where_it_writes_its_report(tmp_path, capsys):
    out, target = tmp_path / "demo", tmp_path / "elsewhere.html"
    target.write_text("keep me\n")
    (out / "csp").mkdir(parents=True)
    runs.write_run(out / "csp", "train", {"space": "tiny-transformer"})  # (an earlier demo's run, say)
    (out / "csp" / "report.html").symlink_to(target)
    _one_line_exit_2(capsys, [*DEMO, "--out", str(out)], "is a symbolic link")
    assert target.read_text() == "keep me\n"


def test_the_demo_writes_its_summary_in_its_run_and_replaces_its_own_files(tmp_path, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "summary.json").write_text("my summary\n")  # (the demo wrote its summary here, over this file)
    assert main(["demo", "--subnets", "4", "--json", "--out", str(out)]) == 0  # (as many stages as cores)
    summary = json.loads(capsys.readouterr().out)  # stdout holds the JSON object and nothing else
    assert summary["identical"] is True and summary["speedup"] > 0
    assert summary["stages"] <= max(1, summary["cores"])  # no more stage processes than cores by default
    assert summary["runs"] == {"csp": str(out / "csp"), "sequential": str(out / "sequential"),
                               "reference": str(out / "reference")}
    assert "Identical to the reference" in (out / "csp" / "report.html").read_text()  # found the reference
    csp = out / "csp"
    assert summary["summary"] == str(csp / "summary.json")
    assert json.loads((csp / "summary.json").read_text()) == summary
    assert (out / "summary.json").read_text() == "my summary\n"
    assert sorted(p.name for p in out.iterdir()) == ["csp", "reference", "sequential", "summary.json"]
    (csp / "notes.txt").write_text("mine\n")
    assert main([*DEMO, "--out", str(out)]) == 0  # its own earlier demo: replaced
    assert (csp / "notes.txt").read_text() == "mine\n"
    assert runs.kind_of(csp) == "train" and (csp / "report.html").is_file()


# ---- 2: SIGTERM (and Ctrl-C) on the reference write status.json ---------------------------------------------
@pytest.mark.parametrize(("sig", "rc", "said", "error"), [
    (signal.SIGTERM, 143, "naspipe: terminated by SIGTERM", "terminated by SIGTERM"),
    (signal.SIGINT, 130, "naspipe: interrupted", "interrupted (SIGINT)"),
], ids=["sigterm", "ctrl-c"])
def test_a_reference_stopped_from_outside_writes_its_status(tmp_path, sig, rc, said, error):
    out = tmp_path / "ref"
    proc = subprocess.Popen([str(BIN / "naspipe"), "reference", "--space", "tiny-transformer", "--subnets", "20000",
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=tmp_path, start_new_session=True)
    try:
        wait_until(lambda: (out / runs.RUN_JSON).exists(), 120, unless=lambda: proc.poll() is not None)
        time.sleep(2)  # (into the training loop: run.json is written just before it)
        assert proc.poll() is None, "the reference ended before the signal"
        assert not (out / runs.STATUS).exists()
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
        psutil.wait_procs(family, timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == rc, stderr
    assert stderr.strip().splitlines()[-1] == said, stderr
    assert json.loads((out / runs.STATUS).read_text()) == {"complete": False, "error": error, "rank": None}
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of its process group is left
    assert not (out / runs.LOSSES).exists() and runs.kind_of(out) == "reference"


def test_a_complete_reference_says_so_and_a_new_one_replaces_the_old_status(tmp_path, capsys):
    out = tmp_path / "ref"
    out.mkdir()
    runs.write_run(out, "reference", {"space": "tiny-transformer"})
    (out / runs.STATUS).write_text(json.dumps({"complete": False, "error": "interrupted (SIGINT)"}))
    assert main(["reference", "--space", "tiny-transformer", "--subnets", "4", "--no-progress",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads((out / runs.STATUS).read_text()) == {"complete": True}


# ---- 3: a failed merge of parts/ is one line, the parts kept -------------------------------------------------
def test_a_corrupt_part_file_is_one_line_and_the_parts_are_kept(tmp_path, capsys, monkeypatch):
    from naspipe.runtime import outputs

    real = outputs.read_parts

    def corrupted(out: Path, stages: int) -> list:
        (out / "parts" / "stage1.json").write_text('{"losses": {"0": ')  # cut short, as a full disk or a crash would
        return real(out, stages)

    monkeypatch.setattr(outputs, "read_parts", corrupted)
    out = tmp_path / "run"
    rc = main(["train", "--space", "tiny-transformer", "--stages", "2", "--subnets", "6", "--no-progress",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("naspipe: error: ") and err.count("\n") == 1, err
    part = out / "parts" / "stage1.json"
    assert f"every stage finished, but their results could not be merged: {str(part)!r} is not valid JSON" in err
    assert f"the stages' results are kept in {str(out / 'parts')!r}" in err, err
    assert (out / "parts" / "stage0.json").is_file() and part.read_text() == '{"losses": {"0": '
    status = json.loads((out / runs.STATUS).read_text())
    assert status["complete"] is False and "could not be merged" in status["error"], status
    assert not (out / runs.LOSSES).exists()


def test_a_part_file_missing_a_field_is_named(tmp_path, capsys, monkeypatch):
    from naspipe.runtime import outputs

    real = outputs.read_parts

    def without_losses(out: Path, stages: int) -> list:
        p = out / "parts" / "stage0.json"
        data = json.loads(p.read_text())
        del data["timing"]
        p.write_text(json.dumps(data))
        return real(out, stages)

    monkeypatch.setattr(outputs, "read_parts", without_losses)
    out = tmp_path / "run"
    rc = main(["train", "--space", "tiny-transformer", "--stages", "2", "--subnets", "6", "--no-progress",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert f"{str(out / 'parts' / 'stage0.json')!r} has no 'timing'" in err, err
