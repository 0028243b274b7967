"""The ``naspipe`` command ends when its work is done, whatever threads user code left running.

Why it exists: Python's exit waits for every non-daemon thread, so a user module that starts one (in a factory,
``data`` or at import) kept ``naspipe train`` running after "wrote OUT" until SIGKILL. ``leave_despite_threads``
runs the exit handlers, flushes, says which threads it leaves, and ends the process with the command's code.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def stray_threads() -> list[threading.Thread]:
    """Live non-daemon threads other than the main thread (what Python's exit would wait for)."""
    return [t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()]


def leave_despite_threads(rc: int) -> None:
    """Return when no stray thread runs; else end the process with ``rc`` now, after the exit handlers."""
    stray = stray_threads()
    if not stray:
        return
    names = ", ".join(repr(t.name) for t in stray)
    print(f"naspipe: note: not waiting for {len(stray)} non-daemon thread(s) user code started ({names})",
          file=sys.stderr)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)
