"""Two processes that form a gloo process group on 127.0.0.1: the tests of what crosses (or breaks) a real link.

``run_pair(target, *args)`` starts ``target(rank, port, *args, out)`` for ranks 0 and 1 from the session's fork
server (torch is imported there once) and returns what they put on ``out`` (``results`` items, two minutes at
most); both processes are joined, or killed, before it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from naspipe.runtime.processes.launcher import process_context
from naspipe.runtime.transport.ports import free_port


def run_pair(target: Callable[..., None], *args: Any, results: int = 1) -> tuple[list[Any], list[int | None]]:
    """``(what the pair reported, their exit codes)``."""
    port = free_port()  # (below the ephemeral range: naspipe.runtime.transport.ports)
    ctx = process_context("forkserver")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, port, *args, out), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = [out.get(timeout=120) for _ in range(results)]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(10)
    return got, [p.exitcode for p in procs]
