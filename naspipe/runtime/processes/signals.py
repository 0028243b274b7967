"""The launcher's signals: SIGTERM ends a run as Ctrl-C does, and a second signal cannot cut its cleanup short.

Why it exists: a run stopped from outside must still say how it ended. SIGTERM's default action killed the
launcher outright (no ``status.json``, the stages left to their lifelines), and a second Ctrl-C while the first
one's cleanup stopped the stages interrupted that cleanup, so ``status.json`` (and the resume hint) never came.
``terminate_raises`` turns SIGTERM into ``Terminated`` for the life of a run; ``deferred`` holds SIGINT and
SIGTERM back while the launcher writes what it knows. Both act in the main thread only (where Python runs
signal handlers); elsewhere they change nothing.

A terminal's Ctrl-C reaches the whole foreground group, the stages' fork server too, which printed a
KeyboardInterrupt traceback (6-58 lines) from its start or its import of torch under the command's own
"interrupted": ``start_fork_server_deaf_to_ctrl_c`` starts it with SIGINT ignored (``children_start_deaf_to_ctrl_c``,
as a truth build starts its workers), and ``server_sigint_back`` (in the server's preload) gives the stages it forks
the handler the command had (Python's, or ignored where the command itself was started with SIGINT ignored, ``cmd &``
in a script).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

EXIT_TERMINATED = 128 + signal.SIGTERM  # the shell's code for a process ended by SIGTERM


class Terminated(BaseException):
    """SIGTERM reached the launcher (a ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception``
    swallows it)."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated("terminated by SIGTERM")


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` inside the block (where the default would kill the process at once)."""
    if not _main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield  # another thread, or someone else's handler: theirs stays
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def deferred() -> Iterator[list[int]]:
    """Inside the block SIGINT and SIGTERM are noted (in the yielded list), not acted on: the caller is already
    stopping and finishes writing first; the handlers before it are back afterwards."""
    seen: list[int] = []
    if not _main_thread():
        yield seen
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, lambda signum, frame: seen.append(signum))
    try:
        yield seen
    finally:
        for s, h in before.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


_SIGINT_BACK = "NASPIPE_SERVER_SIGINT_BACK"  # set while the launcher starts the fork server deaf to Ctrl-C


@contextlib.contextmanager
def children_start_deaf_to_ctrl_c() -> Iterator[bool]:
    """Processes started inside the block start with SIGINT ignored (a disposition that fork and exec keep; Python
    installs its KeyboardInterrupt handler only where SIGINT is not ignored), so a terminal's Ctrl-C during their
    interpreter start, imports or unpickling prints no traceback. Yields True; from another thread, where SIGINT is
    already ignored, or where a handler set outside Python holds it, nothing changes (False). A Ctrl-C sent inside
    the block (the milliseconds of the starts) is discarded: SIGINT is ignored by the whole process then."""
    if not _main_thread() or signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
        yield False
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, previous)


def start_fork_server_deaf_to_ctrl_c() -> None:
    """Start the stages' fork server now, deaf to Ctrl-C through its start and its imports
    (``children_start_deaf_to_ctrl_c``; its preload calls ``server_sigint_back``, and it ignores SIGINT itself once
    it serves, as Python's fork server always does). Only from the main thread and where SIGINT is handled
    (elsewhere the server starts at the first stage, as it did). A server already running is kept."""
    import multiprocessing.forkserver

    with children_start_deaf_to_ctrl_c() as deaf:
        if not deaf:
            return
        os.environ[_SIGINT_BACK] = "1"
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.environ.pop(_SIGINT_BACK, None)


def server_sigint_back() -> None:
    """In the fork server, after its imports: Python's SIGINT handler again where the launcher only ignored SIGINT
    for the server's start (the handler the fork server restores in every stage it forks)."""
    if os.environ.pop(_SIGINT_BACK, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)
