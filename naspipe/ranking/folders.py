"""The run-folder arguments of ``naspipe.rank`` (the run, ``against``, ``seeds``, ``ensemble``), checked in one place.

Why it exists: a Python caller can pass anything where a folder belongs (None, a number, one path where a list of them
is meant, which would iterate its characters); each is refused in one line naming the argument, before any model
loads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from naspipe.errors import UserError


def check_folder(name: str, value: object) -> None:
    """UserError naming the argument ``name`` when ``value`` is no path of a run folder (None, a number: a TypeError
    from inside pathlib)."""
    if isinstance(value, bytes) or not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise UserError(f"{name} must be a run folder (a path), got {type(value).__name__} {value!r:.60}")


def run_folders(name: str, value: Sequence[str | Path]) -> list[str | Path]:
    """``value`` as a list of run folders; UserError naming ``name`` for one path rather than a list, for what is
    no list, and for an element that is no path (``name[i]``)."""
    if isinstance(value, str | bytes | Path):
        raise UserError(f"{name} must be a list of run folders, not one path ({str(value)!r})")
    try:
        folders = list(value)
    except TypeError:
        raise UserError(f"{name} must be a list of run folders, got {type(value).__name__} {value!r:.60}") from None
    for i, f in enumerate(folders):
        check_folder(f"{name}[{i}]", f)
    return folders
