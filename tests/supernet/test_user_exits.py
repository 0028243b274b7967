"""User code that ends or interrupts its process is a failure with one line, never a silent exit 0.

``sys.exit(0)`` in the supernet's function, a candidate's factory, ``data`` or ``loss``, and a factory raising
``KeyboardInterrupt`` itself: before any process starts, train, reference, simulate and profile print one line
naming the function and exit 2 (they exited 0 with no output: ``SystemExit`` is not an ``Exception``; the
``KeyboardInterrupt`` read as Ctrl-C, exit 130). Partway through a run (after the probe) the run fails with one
line and exit 1. A real SIGINT while user code runs stays an interruption (exit 130). The supernets are in
``tests/helpers/process_supernets.py``.
"""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


@pytest.fixture(autouse=True)
def _fresh_supernets():
    """Each test imports its supernet anew: ``load_spec`` keeps one per process, and ``loss_exits_late``'s loss
    counts its calls in that object (a command run before in this process would move where it exits)."""
    from naspipe.supernet import load

    load.forget("process_supernets")


BEFORE_START = [
    ("exits", "exits() raised SystemExit: sys.exit(0) was called"),
    ("factory_exits", "block 'l0', candidate 'quits': the factory raised SystemExit: sys.exit(0) was called"),
    ("data_exits", "data raised SystemExit drawing batch 0: sys.exit(0) was called"),
    ("loss_exits", "loss raised SystemExit on the head's output (4, 2): sys.exit(0) was called"),
    ("factory_interrupts", "block 'l0', candidate 'stops': the factory raised KeyboardInterrupt: (no message)"),
]
COMMANDS = {
    "train": ["--stages", "2", "--subnets", "4", "--no-progress"],
    "reference": ["--subnets", "4", "--no-progress"],
    "simulate": ["--stages", "2", "--subnets", "4"],
    "profile": ["--repeats", "1"],
}


# simulate reads names and costs only: it calls the supernet's function but never a factory, data or loss
CASES = [pytest.param(f, m, c, id=f"{f}-{c}") for f, m in BEFORE_START for c in COMMANDS
         if c != "simulate" or f == "exits"]


@pytest.mark.parametrize(("function", "message", "command"), CASES)
def test_user_code_that_exits_or_interrupts_is_one_line_exit_2(tmp_path, capsys, command, function, message):
    out = tmp_path / ("costs.json" if command == "profile" else "out")
    argv = [command, "--space", f"process_supernets:{function}", *COMMANDS[command]]
    rc = main(argv + ([] if command == "simulate" else ["--out", str(out)]))
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert rc == 2, (rc, err)
    assert err == f"naspipe: error: --space process_supernets:{function}: {message}", err
    assert not cap.out and not out.exists()


def test_a_sigint_while_user_code_runs_stays_an_interruption(tmp_path, capsys):
    rc = main(["reference", "--space", "process_supernets:factory_gets_sigint", "--subnets", "4", "--no-progress",
               "--out", str(tmp_path / "out")])
    assert rc == 130 and capsys.readouterr().err.strip() == "naspipe: interrupted"


def test_data_that_exits_partway_fails_the_train_run(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--space", "process_supernets:data_exits_late", "--stages", "2", "--subnets", "8",
               "--no-progress", "--timeout", "60", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "\n" not in err, err
    assert "stage 0 (rank 0" in err and "failed: SystemExit in d (process_supernets.py:" in err, err
    assert "sys.exit(0) was called" in err, err
    assert json.loads((out / "status.json").read_text())["complete"] is False


@pytest.mark.parametrize(("function", "message"), [
    ("data_exits_late", "subnet 3 of 8: SystemExit: sys.exit(0) was called"),
    ("loss_exits_late", "subnet 3 of 8: SystemExit: sys.exit(0) was called"),
], ids=["data", "loss"])
def test_user_code_that_exits_partway_fails_the_reference(tmp_path, capsys, function, message):
    rc = main(["reference", "--space", f"process_supernets:{function}", "--subnets", "8", "--no-progress",
               "--out", str(tmp_path / "ref")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err == f"naspipe: error: {message}", err


def test_a_loss_that_exits_while_profiled_is_one_line(tmp_path, capsys):
    out = tmp_path / "costs.json"
    rc = main(["profile", "--space", "process_supernets:loss_exits_late", "--out", str(out)])
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert rc == 1 and not cap.out and not out.exists(), (rc, err)
    assert err.startswith("naspipe: error: profiling process_supernets:loss_exits_late failed: SystemExit in "
                          "loss (process_supernets.py:") and err.endswith("sys.exit(0) was called"), err
