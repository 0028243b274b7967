"""Stage processes start without running the caller's ``__main__`` again.

Why it exists: before a child of the ``spawn`` or ``forkserver`` start method unpickles its target, multiprocessing
runs the parent's main script again in it (as ``__mp_main__``), so that objects pickled by reference to
``__main__`` resolve there. A script that calls ``naspipe.train`` without ``if __name__ == "__main__":`` then
starts a run inside every stage's start-up, which multiprocessing refuses (each stage exits with code 1 after pages
of tracebacks); a script fed on standard input (``python - < script.py``) has a main file ``<stdin>`` no child can
open; and a guarded script still runs its top level (imports, data loading, prints) once per stage.

A stage needs nothing from ``__main__``: a supernet defined there travels by value (cloudpickle,
``naspipe.supernet.load``), as a notebook's does, and a policy defined there is refused before start
(``TrainConfig.validate``). So naspipe's own processes start as a notebook's do: the preparation data
multiprocessing sends the child names no main module to run. Only starts made by the calling thread inside
``main_not_run_again`` are affected; every other process (the user's own pools) starts as before.
"""

from __future__ import annotations

import contextlib
import multiprocessing.spawn as mp_spawn
import threading
from collections.abc import Callable, Iterator
from typing import Any

MAIN_KEYS = ("init_main_from_path", "init_main_from_name")  # what makes a child run the parent's __main__
_lock = threading.Lock()
_owners: dict[int, int] = {}  # thread id -> nesting depth of main_not_run_again
_original: Callable[[str], dict[str, Any]] | None = None


def _preparation_data(name: str) -> dict[str, Any]:
    assert _original is not None
    data = _original(name)
    if threading.get_ident() in _owners:
        for key in MAIN_KEYS:
            data.pop(key, None)
    return data


@contextlib.contextmanager
def main_not_run_again() -> Iterator[None]:
    """Inside: processes this thread starts (spawn, forkserver) do not run this process's ``__main__`` again."""
    global _original
    me = threading.get_ident()
    with _lock:
        if not _owners:
            _original = mp_spawn.get_preparation_data
            mp_spawn.get_preparation_data = _preparation_data
        _owners[me] = _owners.get(me, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _owners[me] -= 1
            if not _owners[me]:
                del _owners[me]
            if not _owners:
                mp_spawn.get_preparation_data = _original  # type: ignore[assignment]
                _original = None


def start(proc: Any) -> None:
    """``proc.start()`` without the caller's ``__main__`` run again in the child."""
    with main_not_run_again():
        proc.start()
