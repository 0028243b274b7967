"""A run's output directory: refuse one that holds another run, files naspipe did not write, or cannot be
written, then prepare it.

Why it exists: the configuration (``naspipe.runtime.config``), the checkpoint code and the reference command
all check and prepare output directories; these checks import nothing else from the runtime, so neither of
them has to import the other. ``ConfigError`` lives here for the same reason (every check raises it).

A folder is a naspipe run only when its ``run.json`` says so (``naspipe.runfolder.runs``). Without ``--overwrite``,
naspipe writes into a folder only when nothing there bears a name it writes, or when it holds a reference run
and a reference replaces it; ``--overwrite`` clears only those names. A symbolic link or a folder under such a
name is refused even then (naspipe neither follows nor deletes it), and so is an input of the command that
the run would delete.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from naspipe.errors import UserError
from naspipe.fileio import atomic
from naspipe.runfolder import runs

T = TypeVar("T")


class ConfigError(UserError):
    """A run configuration is invalid; the message is one line saying what is wrong and what is allowed."""


def check_path(out: Path) -> None:
    """Refuse an ``out`` that is a dangling symbolic link, exists and is not a directory, or has a name longer than
    its file system allows (found before a process starts, not when the run's folder is made)."""
    out = Path(out)
    shown = f"{str(out)[:80]!r}{'...' if len(str(out)) > 80 else ''}"
    try:
        if out.is_symlink() and not out.exists():
            raise ConfigError(f"output directory {str(out)!r} is a symbolic link to {os.readlink(out)!r}, which "
                              "does not exist; create the target or choose another directory")
        if out.exists() and not out.is_dir():
            raise ConfigError(f"output path {str(out)!r} exists and is not a directory")
        longest = max(len(os.fsencode(part)) for part in out.parts) if out.parts else 0
        if longest > _name_max(out):
            raise ConfigError(f"output directory {shown} cannot be used: one of its names is {longest} bytes long, "
                              f"more than the {_name_max(out)} its file system allows")
    except OSError as e:  # a name too long, a folder on the way that cannot be searched
        raise ConfigError(f"output directory {shown} cannot be used: {e.strerror or e}") from None


def _name_max(out: Path) -> int:
    """The longest name (bytes) the file system of ``out``'s nearest existing folder allows (255 if it won't say)."""
    probe = out.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_out_dir(out: Path, overwrite: bool, kind: str = "train", inputs: Iterable[str | Path] = ()) -> None:
    """Refuse a directory for a run of ``kind`` that holds another run or files naspipe did not write (unless
    ``overwrite``), a link or folder under a name the run writes, an input the run would delete (``inputs``:
    the files the command reads; a reference keeps them instead), or one that cannot be written."""
    out = Path(out)
    check_path(out)
    why = runs.misplaced(out)
    if why is not None:
        raise ConfigError(f"{why}; move it out of {str(out)!r} or choose another directory")
    held = runs.held_file(out)
    owner = runs.kind_of(out)
    if held is not None and not overwrite:
        if owner is None:
            raise ConfigError(f"output directory {str(out)!r} holds {held}, which no naspipe run wrote there (no "
                              f"valid {runs.RUN_JSON}); choose another directory or pass --overwrite to replace it")
        if owner != kind:
            raise ConfigError(f"output directory {str(out)!r} holds a {owner} run ({held}); choose another directory "
                              "or pass --overwrite (which clears it first)")
        if kind == "train":
            raise ConfigError(f"output directory {str(out)!r} already holds a run ({held}); "
                              "choose another directory or pass --overwrite")
    if kind == "train":
        entries = {os.path.realpath(p) for p in runs.run_entries(out)}
        for f in inputs:
            if os.path.realpath(f) in entries:
                raise ConfigError(f"{str(f)!r} is an input of this run and a file of the run in {str(out)!r} that "
                                  "--overwrite would delete; copy it elsewhere first")
    try:  # (the one writability check; check_path above refused a dangling link or a file)
        atomic.check_writable(out, "output directory")
    except atomic.NotWritable as e:
        raise ConfigError(str(e)) from None


def prepare_out_dir(out: Path, overwrite: bool, kind: str = "train") -> None:
    """Create ``out`` and clear the files of an earlier run (only with ``overwrite``)."""
    check_out_dir(out, overwrite, kind)
    out.mkdir(parents=True, exist_ok=True)
    runs.clear(out, checkpoints=False, kind=kind)
    (out / "parts").mkdir()


def save_reference_run(out: Path, save: Callable[[Path], T]) -> T:
    """``save(out)`` of a reference run, under the folder's lock: refused (ConfigError) when ``out`` holds
    anything but an earlier reference (``check_out_dir``) or another run is writing there; that reference's
    files are deleted first (only they)."""
    from naspipe.runfolder.runlock import RunLocked, locked

    out = Path(out)
    check_out_dir(out, overwrite=False, kind="reference")
    try:
        with locked(out):
            check_out_dir(out, overwrite=False, kind="reference")  # again: another run may have written meanwhile
            runs.clear(out, kind="reference")
            return save(out)
    except RunLocked as e:
        raise ConfigError(str(e)) from None
