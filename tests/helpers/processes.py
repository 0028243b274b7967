"""Which processes a test session started and left alive: the checks behind ``no_process_left_behind``."""

from __future__ import annotations

import psutil


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants(parent: psutil.Process) -> list[psutil.Process]:
    """Live processes below ``parent`` except multiprocessing's long-lived helpers (the session's fork
    server and resource tracker, which end with the session), oldest first: a run's stages."""
    out = []
    for p in parent.children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if not alive(p) or "resource_tracker" in cmd:
                continue
            if "multiprocessing.forkserver" in cmd and p.ppid() == parent.pid:
                continue  # the session's fork server (its children are the stages)
        except psutil.NoSuchProcess:
            continue
        out.append(p)
    return sorted(out, key=lambda p: (p.create_time(), p.pid))


def leftovers() -> list[psutil.Process]:
    return descendants(psutil.Process())
