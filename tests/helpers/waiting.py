"""Waiting with a deadline: the tests poll for what they wait on (a file, a process, a drawn figure) until a
timeout, never sleep a fixed time hoping it is enough, and never wait without one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(done: Callable[[], T], timeout_s: float, *, every_s: float = 0.05,
               unless: Callable[[], object] | None = None) -> T:
    """``done()``'s first truthy value, polled every ``every_s`` seconds; its last (falsy) value once ``timeout_s``
    have passed, or once ``unless()`` is truthy first (the process or thread waited on has ended). The caller
    asserts on the result, with its own message."""
    deadline = time.monotonic() + timeout_s
    while not (value := done()):
        if time.monotonic() >= deadline or (unless is not None and unless()):
            break
        time.sleep(every_s)
    return value
