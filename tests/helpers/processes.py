"""Which processes a test session started and left alive: the checks behind ``no_process_left_behind``; whether a
process ignores Ctrl-C; and a run going on in a thread of the test process, for tests that act on it while it
trains."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ignores_sigint(pid: int) -> bool:
    """The process ignores SIGINT (its ``SigIgn`` mask in /proc)."""
    mask = next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("SigIgn:"))
    return bool(int(mask, 16) >> (signal.SIGINT - 1) & 1)


def descendants(parent: psutil.Process) -> list[psutil.Process]:
    """Live processes below ``parent`` except the session's long-lived helpers (multiprocessing's fork server and
    resource tracker, the warm naspipe: they end with the session), oldest first: a run's stages, a command."""
    out = []
    for p in parent.children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if not alive(p) or "resource_tracker" in cmd:
                continue
            if ("multiprocessing.forkserver" in cmd or "warm_naspipe.py serve" in cmd) and p.ppid() == parent.pid:
                continue  # the session's fork server or warm naspipe (their children are the stages, the commands)
        except psutil.NoSuchProcess:
            continue
        out.append(p)
    return sorted(out, key=lambda p: (p.create_time(), p.pid))


def leftovers() -> list[psutil.Process]:
    return descendants(psutil.Process())


def train_in_thread(cfg: Any) -> tuple[threading.Thread, dict]:
    """``naspipe.runtime.train(cfg)`` in a daemon thread; the box gets ``result`` or ``error``, then ``end``
    (its ``time.monotonic()``)."""
    from naspipe.runtime import train

    box: dict = {}

    def target() -> None:
        try:
            box["result"] = train(cfg)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
        box["end"] = time.monotonic()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box
