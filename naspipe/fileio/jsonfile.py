"""JSON from files a user can edit, where too deep a nesting is malformed JSON like any other (a ``ValueError``).

Why it exists: ``json.loads`` raises ``RecursionError``, not ``ValueError``, for input nested more deeply than the
interpreter's recursion limit (``[[[...`` 100,000 deep is 200 kB), so a reader that refuses malformed JSON by
catching ``ValueError`` let a traceback through instead of its one line; a hand-edited ``checkpoint/complete.json``
even broke a run's failure handling (no ``status.json``). Every reader of a file a user can edit (run folders,
checkpoints, traces, results, spaces, profiles, truth folders) parses with ``loads`` here.
"""

from __future__ import annotations

import json
from typing import Any


class NestedTooDeeply(ValueError):
    """The JSON nests more deeply than Python's parser can follow."""


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """``json.loads``, raising ``NestedTooDeeply`` (a ``ValueError``) where it would raise ``RecursionError``."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise NestedTooDeeply("nested too deeply") from None
