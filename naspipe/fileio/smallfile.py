"""Read a small text file that a user may have replaced by a pipe, a device or a huge file: ``read_small``.

Why it exists: a run folder's ``run.json`` or a truth's entry is a name a user can point anywhere. Read with
``Path.read_text()``, a named pipe there blocked ``naspipe rank``, ``verify`` and ``reference --out`` for ever, and a
link to ``/dev/zero`` read until memory ran out. ``read_small`` opens the file without blocking, looks at what it
opened (not at the name, which may change between a look and an open) and reads it only where it is a regular
file of at most ``limit`` bytes; anything else is refused in one line naming the file. No torch.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from naspipe.errors import UserError


class NotASmallFile(UserError):
    """A file that is no regular file, or larger than its cap (the message names it, in one line)."""


def kind(mode: int) -> str:
    """What a non-regular file is, in words (``a named pipe``)."""
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], *, again: str = "",
                 error: type[UserError] = NotASmallFile) -> BinaryIO:
    """``path`` opened for binary reading, only where it is a regular file (through links): opened without blocking
    (a named pipe with no writer would hold the open itself), then looked at (what was opened, not the name).

    FileNotFoundError where it is not there; ``error`` (one line naming it, then ``again``) where it is a dangling
    link or something else than a regular file. For files too large for ``read_small`` (a run's weights)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if p.is_symlink():
            raise error(f"{p}: a symbolic link to {os.readlink(p)!r}, which does not exist{again}") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{p}: {kind(mode)}, not a file{again}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small(path: str | os.PathLike[str], limit: int | None, *, what: str = "the file",
               again: str = "", error: type[UserError] = NotASmallFile) -> str:
    """The UTF-8 text of ``path``, only where it is a regular file (through links) of at most ``limit`` bytes
    (None: no cap; the file is still only read where it is regular).

    FileNotFoundError where it is not there; ``error`` (one line naming it, then ``again``) where it is a dangling
    link, something else than a regular file or more than ``limit`` bytes (``what`` names what it should be: "a
    truth's entry"); OSError or UnicodeDecodeError where it cannot be read."""
    p = Path(path)
    with open_regular(p, again=again, error=error) as f:
        size = os.fstat(f.fileno()).st_size
        if limit is not None and size > limit:
            raise error(f"{p}: {size} bytes, more than the {limit} {what} can be{again}")
        data = f.read(-1 if limit is None else limit + 1)
    if limit is not None and len(data) > limit:  # (it grew since)
        raise error(f"{p}: more than the {limit} bytes {what} can be{again}")
    return data.decode("utf-8")
