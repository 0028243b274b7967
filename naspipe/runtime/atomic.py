"""Files that are either complete or absent: write to a temporary file, fsync, rename, fsync the directory.

Why it exists: a checkpoint (``naspipe.runtime.checkpoint``) and a stage's outputs must survive a crash at any
instant without leaving a half-written file that a resume or a merge would read.
"""

from __future__ import annotations

import os
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


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``: a temporary file in the same directory, fsync, rename, fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
