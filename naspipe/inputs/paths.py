"""Folder and file names a user passes for a command to write (``--out``): one that names nothing, or that holds a
control character, is refused in one line.

Why it exists: ``--out "$UNSET"`` (empty) wrote a run into the current folder, and a name holding a newline was
taken, then broke what names the folder line by line: the resume hint, the generated torchrun lines and SLURM
script, the logs. No torch here.
"""

from __future__ import annotations

import unicodedata


def out_name_error(text: str, what: str = "folder") -> str | None:
    """Why ``text`` cannot name the ``what`` a command writes (None: it can): empty or blank, or holding a control
    character (a newline, a tab, a carriage return, an escape: Unicode category Cc)."""
    if not text.strip():
        return f"must name a {what}, got {text!r}"
    bad = next((c for c in text if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return (f"must not hold a control character ({bad!r}: it breaks the scripts and logs that name the {what}), "
                f"got {text!r}")
    return None
