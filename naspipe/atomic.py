"""Files that are either complete or absent: write to a temporary file, fsync, rename, fsync the directory.

Why it exists: a checkpoint (``naspipe.runtime.checkpoint``), a stage's outputs, the weights files and a run's
``status.json`` must survive a crash or a full disk at any instant without leaving a half-written file that a
resume, a merge or a reader would take for the real one. This is the project's one atomic writer: a failed
write (``ENOSPC``, a crash of the writer's code) removes its temporary file and leaves the old file intact.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write in full; on leaving the block it is fsynced and renamed onto
    ``path`` (then the directory is fsynced). If the block raises, or the fsync or rename fails, the temporary
    file is removed and ``path`` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (``atomic_path``)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()


def write_text_atomic(path: str | Path, text: str) -> None:
    """``write_atomic`` of UTF-8 text."""
    write_atomic(path, text.encode("utf-8"))


def is_disk_full(e: BaseException) -> bool:
    """The error is a full disk or an exhausted quota."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_message(out: str | Path, e: OSError) -> str:
    """One line for a full disk: which folder's disk, which file could not be written (when known), what to do."""
    where = f" writing {str(e.filename)!r}" if getattr(e, "filename", None) else ""
    return (f"the disk holding {str(out)!r} is full ({e.strerror or 'no space left on device'}{where}); "
            "free space there or choose another --out")
