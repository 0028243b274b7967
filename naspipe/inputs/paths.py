"""Folder and file names a user passes for a command to write (``--out``): one that names nothing, or that holds a
control character, a line separator or a bidirectional control, is refused in one line.

Why it exists: ``--out "$UNSET"`` (empty) wrote a run into the current folder, and a name holding a newline was
taken, then broke what names the folder line by line: the resume hint, the generated torchrun lines and SLURM
script, the logs; U+2028 and U+2029 break lines too, and U+202E shows a name reversed. No torch here.
"""

from __future__ import annotations

import unicodedata

# Unicode's Bidi_Control characters: invisible, they make a name display in another order than it is read
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _bad_character(c: str) -> str | None:
    """What ``c`` is, where a name a command writes must not hold it (None: it may)."""
    cat = unicodedata.category(c)
    if cat == "Cc":
        return "control character"
    if cat in ("Zl", "Zp"):  # U+2028, U+2029: a line break to every reader that follows Unicode
        return "line or paragraph separator"
    if c in BIDI_CONTROLS:
        return "bidirectional control character"
    return None


def out_name_error(text: str, what: str = "folder") -> str | None:
    """Why ``text`` cannot name the ``what`` a command writes (None: it can): empty or blank, or holding a control
    character (a newline, a tab, a carriage return, an escape: Unicode category Cc), a line or paragraph separator
    (U+2028, U+2029) or a bidirectional control (U+202E and the other Bidi_Control characters)."""
    if not text.strip():
        return f"must name a {what}, got {text!r}"
    for c in text:
        if (kind := _bad_character(c)) is not None:
            why = ("it makes the name display in another order than it is" if kind.startswith("bidi") else
                   f"it breaks the scripts and logs that name the {what}")
            return f"must not hold a {kind} ({c!r}: {why}), got {text!r}"
    return None
