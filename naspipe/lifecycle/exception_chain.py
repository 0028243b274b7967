"""An exception and the ones it replaced, for what a failure says about itself further down its chain.

Why it exists: the error that reaches a handler is not always the one that names what happened. A neighbour's
loss (``peer``) can be replaced by a later error in a stage's cleanup, and a first Ctrl-C's checkpoint by a second
Ctrl-C raised while the first unwinds; both are found on the exceptions the newest one replaced.
"""

from __future__ import annotations

from collections.abc import Iterator


def chain(e: BaseException | None) -> Iterator[BaseException]:
    """``e``, then what it was raised from or while handling (``__cause__``, else ``__context__``), and so on; each
    exception once (a chain can loop)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__
