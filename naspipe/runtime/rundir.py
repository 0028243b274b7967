"""A run's output directory: refuse one that holds another run or cannot be written, then prepare it.

Why it exists: the configuration (``naspipe.runtime.config``), the checkpoint code and the reference command
all check and prepare output directories; these checks import nothing else from the runtime, so neither of
them has to import the other. ``ConfigError`` lives here for the same reason (every check raises it).
"""

from __future__ import annotations

from pathlib import Path

from naspipe import runs
from naspipe.runs import RUN_FILES


class ConfigError(ValueError):
    """A run configuration is invalid; the message is one line saying what is wrong and what is allowed."""


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse a directory that holds another run (unless ``overwrite``) or cannot be a directory."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output path {str(out)!r} exists and is not a directory")
    held = [f for f in (*RUN_FILES, "checkpoint") if (out / f).exists()]
    if held and not overwrite:
        raise ConfigError(f"output directory {str(out)!r} already holds a run ({held[0]}); "
                          "choose another directory or pass --overwrite")
    check_writable(out)


def check_writable(out: Path) -> None:
    """Refuse an output directory that cannot be created or written (probed with a temporary folder in
    ``out`` or its nearest existing parent, removed again: nothing is left behind)."""
    import os
    import tempfile

    out = Path(out)
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"output directory {str(out)!r} cannot be created: {str(probe)!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".naspipe-probe", dir=probe))
    except OSError as e:
        raise ConfigError(f"output directory {str(out)!r} cannot be written: {e.strerror or e}") from None


def prepare_out_dir(out: Path, overwrite: bool) -> None:
    """Create ``out`` and clear the files of an earlier run (only with ``overwrite``)."""
    check_out_dir(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    runs.clear(out, checkpoints=False)
    (out / "parts").mkdir()
