"""Files that are either complete or absent: write to a temporary file, fsync, rename, fsync the directory.

Why it exists: a checkpoint (``naspipe.runtime.checkpoint``), a stage's outputs, the weights files and a run's
``status.json`` must survive a crash or a full disk at any instant without leaving a half-written file that a
resume, a merge or a reader would take for the real one. This is the project's one atomic writer: a failed
write (``ENOSPC``, a crash of the writer's code) removes its temporary file and leaves the old file intact.
It also holds the one writability check (``check_writable``), made before minutes of work that end in a
write: a run directory before any process starts, a cost profile before anything is measured.
"""

from __future__ import annotations

import errno
import os
import tempfile
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


def write_once_atomic(path: str | Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically unless ``path`` exists: the complete file is linked into place, which
    fails where another writer's is already there (compare and swap on a file's absence). Returns whether this
    writer's data stands; the other's is left intact."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.once{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    _fsync_dir(path.parent)
    return True


def is_disk_full(e: BaseException) -> bool:
    """The error is a full disk or an exhausted quota."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_message(out: str | Path, e: OSError) -> str:
    """One line for a full disk: which folder's disk, which file could not be written (when known), what to do."""
    where = f" writing {str(e.filename)!r}" if getattr(e, "filename", None) else ""
    return (f"the disk holding {str(out)!r} is full ({e.strerror or 'no space left on device'}{where}); "
            "free space there or choose another --out")


class NotWritable(OSError):
    """A path that cannot be written; the message is one line naming it and why."""


def check_writable(path: str | Path, what: str = "output directory", *, file: bool = False) -> Path:
    """Refuse, before any work, a ``path`` that cannot be written; nothing is created or left behind.

    ``file=False``: ``path`` is a folder that will be created if missing; ``file=True``: a file, whose folder
    will be. The nearest existing folder on the way is probed with a temporary folder, removed again. Raises
    ``NotWritable`` (one line; ``what`` names the path for the user). Returns ``path`` as a ``Path``."""
    p = Path(path)
    if file and p.is_dir():
        raise NotWritable(f"{str(p)!r} is a directory; give the {what}'s file name (e.g. {str(p / 'x.json')!r})")
    probe = p.parent if file else p
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link on the way (OUT/csp below a dangling OUT)
            raise NotWritable(f"{what} {str(p)!r} cannot be created: {str(probe)!r} is a symbolic link to "
                              f"{os.readlink(probe)!r}, which does not exist")
        probe = probe.parent
    if not probe.is_dir():
        raise NotWritable(f"{what} {str(p)!r} cannot be created: {str(probe)!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".naspipe-probe", dir=probe))
    except OSError as e:
        raise NotWritable(f"{what} {str(p)!r} cannot be written: {e.strerror or e}") from None
    return p
