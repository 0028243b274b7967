"""An exclusive lock on a run folder for the life of a run: a second writer is refused, not interleaved.

Why it exists: two ``naspipe train --overwrite`` (or two ``--resume``) into one folder would otherwise both run,
interleave their events, and the slower one would overwrite the other's results and ``status.json``. The
process that runs (the launcher, the reference trainer, rank 0 under torchrun) holds ``fcntl.flock`` on
``OUT/.naspipe.lock`` from before it prepares the folder until its last file is written; the kernel releases
the lock when the holder exits, however it exits, so a crashed run never leaves the folder locked. The lock
file holds the holder's pid (for the message) and is removed on release. No torch here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = ".naspipe.lock"


class RunLocked(RuntimeError):
    """Another process holds the run folder (the message is one line naming it and the holder's pid; ``holder``:
    " (process PID)", or "" where the lock file does not say)."""

    holder = ""


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" (process {pid})" if pid.isdigit() else ""


def acquire(out: str | Path) -> int:
    """Create ``out`` if needed and lock it; the lock's file descriptor (``release`` it). RunLocked when another
    process holds it. Without ``fcntl`` (Windows) the folder is not locked and -1 is returned."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        return -1
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    path = d / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            err = RunLocked(f"output directory {str(d)!r} is in use by another naspipe run{_holder(path)}; wait "
                            "for it to end or choose another directory")
            err.holder = _holder(path)
            raise err from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file the previous holder removed between our open and our lock: ours
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            except OSError:  # a full disk: the pid is only for the message
                pass
            return fd
        os.close(fd)


def release(out: str | Path, fd: int) -> None:
    """Remove the lock file and release the lock taken by ``acquire``."""
    if fd < 0:
        return
    try:
        os.unlink(Path(out) / LOCK)
    except OSError:
        pass
    os.close(fd)


@contextmanager
def locked(out: str | Path) -> Iterator[None]:
    """Hold the lock on ``out`` for the block (``acquire`` / ``release``)."""
    fd = acquire(out)
    try:
        yield
    finally:
        release(out, fd)
