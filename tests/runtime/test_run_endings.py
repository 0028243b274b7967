"""A finished run is never thrown away, and a run stopped from outside says how it ended.

* a user module that starts a non-daemon thread in the stage processes: the run completes (losses.csv,
  params.json, verified identical to the reference) within seconds, where the stages never exited and the run
  was stopped after 79 s with nothing merged; with such a thread in the launcher too, the command still ends;
* the launcher's "no stage reported anything" backstop follows ``--timeout`` (it was 2 x timeout + 30 s);
* SIGTERM on the launcher writes ``status.json`` as SIGINT does; two quick Ctrl-C still leave it; both print
  the resume hint;
* a stage that leaves with exit code 0 partway is blamed itself, not the peer that lost it;
* the resume hint is a command that works (an injected ``--fault`` dropped), and ``error-stage*.txt`` leads
  with its one-line cause.

The user modules are in ``tests/helpers/process_supernets.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from naspipe.cli import main
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.checkpoint import newest_complete, root_of
from naspipe.runtime.processes.launcher import TrainError
from naspipe.runtime.transport.ports import free_port
from tests.helpers.processes import alive, descendants, ignores_sigint
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

BIN = Path(sys.executable).parent
TESTS = Path(__file__).resolve().parents[1]
HELPERS = TESTS / "helpers"  # the user modules, found by name


def _env() -> dict[str, str]:
    """This environment as it is when a test runs (its TMPDIR is the session's: tests/conftest.py), for a
    command in a process of its own."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"},
            "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(HELPERS)])}


SMALL = ["--stages", "2", "--subnets", "8", "--no-progress"]


def test_a_thread_left_running_in_the_stages_does_not_throw_the_run_away(tmp_path, capsys):
    run, ref = tmp_path / "run", tmp_path / "ref"
    t0 = time.monotonic()
    rc = main(["train", "--space", "process_supernets:stage_thread", *SMALL, "--timeout", "20", "--out", str(run)])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 0, err
    assert took < 60, took  # (it ended after 79 s: "no stage reported anything for 70 s")
    assert (run / "losses.csv").exists() and (run / "params.json").exists()
    assert main(["reference", "--space", "process_supernets:stage_thread", "--subnets", "8", "--no-progress",
                 "--out", str(ref)]) == 0
    capsys.readouterr()
    assert main(["verify", str(run), str(ref)]) == 0, capsys.readouterr()


def test_a_thread_left_running_in_the_launcher_too_does_not_hold_the_command(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([str(BIN / "naspipe"), "train", "--space", "process_supernets:thread_everywhere",
                             *SMALL, "--timeout", "20", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:  # (the old launcher waited for the thread: 300 s)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert stdout.strip().endswith(f"wrote {out}"), stdout
    assert "not waiting for 1 non-daemon thread(s) user code started ('user-linger')" in stderr, stderr
    assert (out / "losses.csv").exists() and json.loads((out / "status.json").read_text())["complete"] is True


def test_the_launchers_backstop_follows_the_timeout(tmp_path):
    """Every stage stopped (SIGSTOP): none reports anything; the run ends about --timeout later, not 2 x + 30 s."""
    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=2, subnets=400, jitter_ms=3.0, progress=False,
                             timeout=4.0)
    box: dict = {}

    def target() -> None:
        try:
            train(cfg)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
        box["end"] = time.monotonic()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    events = cfg.out / "events.jsonl"
    assert wait_until(lambda: events.exists() and len(events.read_bytes().splitlines()) >= 20, 120,
                      unless=lambda: not t.is_alive()), "the run ended or never started"
    procs = descendants(psutil.Process())
    assert len(procs) == 2
    for p in procs:
        p.suspend()
    stopped = time.monotonic()
    t.join(60)
    assert not t.is_alive()
    assert isinstance(box["error"], TrainError), box
    assert "no stage reported anything for 9 s (--timeout 4)" in str(box["error"]), str(box["error"])
    assert box["end"] - stopped < 9 + 8, box["end"] - stopped  # (was 38 s)
    for p in procs:
        p.wait(10) if alive(p) else None


def _signal_a_run(tmp_path: Path, signals: list[int]) -> tuple[int, str, Path]:
    """``naspipe train`` with checkpoints; after the first checkpoint, ``signals`` to the launcher alone."""
    out = tmp_path / "run"
    proc = subprocess.Popen([str(BIN / "naspipe"), "train", "--space", "digits-cnn", "--stages", "2", "--subnets",
                             "400", "--jitter-ms", "3", "--no-progress", "--checkpoint-every", "10", "--timeout",
                             "60", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=tmp_path, start_new_session=True)
    try:
        launcher = psutil.Process(proc.pid)
        wait_until(lambda: newest_complete(root_of(out)) is not None, 150, unless=lambda: proc.poll() is not None)
        assert proc.poll() is None, "the run ended before the signal"
        family = [p for p in launcher.children(recursive=True) if alive(p)]
        stages = _stages(launcher)
        assert len(stages) == 2 and not any(ignores_sigint(p.pid) for p in stages)  # (the fork server's start aside)
        for s in signals:
            proc.send_signal(s)
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=60)
        psutil.wait_procs(family, timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    return proc.returncode, stderr.strip(), out


@pytest.mark.parametrize(("signals", "rc", "said"), [
    ([signal.SIGTERM], 143, "naspipe: terminated by SIGTERM"),
    ([signal.SIGINT], 130, "naspipe: interrupted"),
    ([signal.SIGINT, signal.SIGINT], 130, "naspipe: interrupted"),
], ids=["sigterm", "ctrl-c", "ctrl-c-twice"])
def test_a_run_stopped_from_outside_writes_its_status_and_the_resume_hint(tmp_path, signals, rc, said):
    code, err, out = _signal_a_run(tmp_path, signals)
    assert code == rc, err
    status = json.loads((out / "status.json").read_text())
    assert status["complete"] is False and status["checkpoint"] >= 10, status
    last = err.splitlines()[-1]
    assert last.startswith(f"{said}; the last complete checkpoint is at subnet {status['checkpoint']}: to "
                           "continue, run naspipe train --space digits-cnn "), err
    assert last.endswith(f"--resume {out}"), err


def _stages(launcher: psutil.Process) -> list[psutil.Process]:
    """The stage processes: the children of the launcher's fork server."""
    return [c for p in launcher.children() if alive(p) and "forkserver" in " ".join(p.cmdline())
            for c in p.children() if alive(c)]


def test_a_command_started_with_ctrl_c_ignored_keeps_it_ignored_in_its_stages(tmp_path):
    """``naspipe train &`` from a script starts with SIGINT ignored, and so do its stages: a Ctrl-C to the group
    changes nothing (a stage once died of it, KeyboardInterrupt, while the command went on ignoring it)."""
    proc = subprocess.Popen([str(BIN / "naspipe"), "train", "--space", "digits-cnn", "--stages", "2", "--subnets",
                             "40", "--jitter-ms", "30", "--no-progress", "--out", str(tmp_path / "run")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        launcher = psutil.Process(proc.pid)
        assert wait_until(lambda: len(_stages(launcher)) >= 2 and (tmp_path / "run" / "events.jsonl").exists(), 60,
                          every_s=0.02, unless=lambda: proc.poll() is not None), "the stages did not start"
        assert len(stages := _stages(launcher)) >= 2 and all(ignores_sigint(p.pid) for p in stages)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == 0 and (tmp_path / "run" / "metrics.json").exists(), stderr


def test_ctrl_c_while_the_fork_server_imports_torch_says_interrupted_and_nothing_more(tmp_path):
    """A terminal's Ctrl-C reaches the whole foreground group, the fork server too, which used to print a
    KeyboardInterrupt traceback (6-58 lines) from its import of torch under the command's own line."""
    proc = subprocess.Popen([str(BIN / "naspipe"), "train", "--space", "digits-cnn", *SMALL, "--out",
                             str(tmp_path / "run")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=tmp_path, start_new_session=True)
    try:
        launcher = psutil.Process(proc.pid)
        # the fork server started, and the launcher itself hears Ctrl-C again (it ignores it while it starts one)
        assert wait_until(lambda: any("forkserver" in " ".join(p.cmdline()) for p in launcher.children() if alive(p))
                          and not ignores_sigint(launcher.pid), 60, every_s=0.01,
                          unless=lambda: proc.poll() is not None), "no fork server started"
        family = launcher.children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)  # (the server's import of torch takes about a second)
        _, stderr = proc.communicate(timeout=60)
        assert not psutil.wait_procs(family, timeout=20)[1], "a process outlived the command"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("naspipe: interrupted"), stderr


def test_a_stage_that_exits_0_partway_is_blamed_itself(tmp_path, capsys):
    rc = main(["train", "--space", "process_supernets:stage_exits_midrun", *SMALL, "--timeout", "30",
               "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert rc == 1, err
    assert err.startswith("naspipe: error: stage 1 (rank 1, pid ") and \
        "exited with code 0 before it finished its work" in err, err


def test_the_resume_hint_is_a_command_that_works_and_the_error_file_leads_with_its_cause(tmp_path, capsys,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["train", "--space", "process_supernets:stage_thread", "--stages", "2", "--subnets", "20",
               "--no-progress", "--timeout", "30", "--checkpoint-every", "4", "--fault", "raise:1:12",
               "--out", "run"])
    err = capsys.readouterr().err.strip()
    assert rc == 1, err
    assert (tmp_path / "run" / "error-stage1.txt").read_text().splitlines()[:3] == [
        "InjectedFault: injected fault at F(12,1)", "", "Traceback (most recent call last):"]
    head, _, command = err.partition("to continue, run ")
    assert command.startswith("naspipe train ") and "--fault" not in command, err
    assert command.endswith("--resume run"), err
    assert main(shlex.split(command)[1:]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "status.json").read_text())["complete"] is True


@pytest.mark.parametrize(("function", "rc", "said"), [
    ("thread_everywhere", 0, "not waiting for 1 non-daemon thread(s) user code started ('user-linger')"),
    ("data_exits_late", 1, "naspipe: error: stage 0 (rank 0) failed: SystemExit in d (process_supernets.py:"),
], ids=["stray-thread", "sys-exit"])
def test_under_torchrun_a_stray_thread_or_sys_exit_in_user_code_neither_hangs_nor_passes(tmp_path, function, rc,
                                                                                          said):

    port = free_port()  # (below the ephemeral range: naspipe.runtime.transport.ports)
    out = tmp_path / "run"
    proc = subprocess.Popen([str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                             "--master-port", str(port), "-m", "naspipe.torchrun", "--space",
                             f"process_supernets:{function}", "--subnets", "8", "--no-progress", "--timeout", "30",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            cwd=tmp_path, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:  # (a rank waited for the thread, or one exited 0 and its peer waited for it)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == rc and said in stderr, stderr[-3000:]
    assert (out / "losses.csv").exists() == (rc == 0)
