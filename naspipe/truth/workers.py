"""Build a ground truth: the pending entries of a truth folder, trained by one worker process per core.

Why it exists: a truth is hundreds of independent stand-alone trainings. They go on a work queue (a
``torch.multiprocessing`` pool of spawned workers, ``imap_unordered``); each worker stores its own record
atomically the moment it finishes, so a killed build loses at most the entries in flight and the next build
trains only what is missing. Every entry's bits depend on its (architecture, seed) alone, never on the worker
or the order, so a resumed build ends with the same table as one uninterrupted build.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from naspipe.spaces.space import SearchSpace
from naspipe.truth.records import (
    ENTRIES,
    Truth,
    TruthError,
    TruthSettings,
    assemble,
    pending,
    start,
    write_table,
)


def build_truth(space: SearchSpace, spec: str, folder: str | Path, settings: TruthSettings, *, workers: int = 1,
                progress: bool = False, limit: int | None = None) -> Truth | None:
    """Train the entries of ``settings`` not yet in ``folder`` and write the table when all are done.

    ``spec`` is how a worker resolves the space (preset name, JSON file, ``module:function``); ``limit`` trains
    at most that many entries (None: all), and the truth (None while entries are missing) is returned.
    """
    d = Path(folder)
    with holding(d):
        return _build(space, spec, d, settings, workers, progress, limit)


def _build(space: SearchSpace, spec: str, d: Path, settings: TruthSettings, workers: int, progress: bool,
           limit: int | None) -> Truth | None:
    start(d, settings)
    todo = pending(d, settings)
    if limit is not None:
        todo = todo[:limit]
    if todo:
        check_entries_writable(d)
    jobs = [(spec, settings.space_digest, a, s, settings.steps, settings.optimizer, settings.lr, str(d))
            for a, s in todo]
    bar = None
    if progress and jobs:
        from tqdm import tqdm

        total = len(settings.archs) * len(settings.seeds)
        bar = tqdm(total=total, initial=total - len(pending(d, settings)), desc=f"truth {space.name}",
                   unit="entry", file=sys.stderr)
    from naspipe.lifecycle import kernels

    # one worker trains here, unless this process computes under other kernels: then one worker process does
    here = workers <= 1 and kernels.runs_here(settings.kernels)
    try:
        if here:
            from naspipe.lifecycle.threads import intra_op_threads
            from naspipe.truth.standalone import work

            with intra_op_threads(1):  # (a worker's one thread, ``standalone.init_worker``: the caller's given back)
                for job in jobs:
                    work(job)
                    if bar is not None:
                        bar.update(1)
        elif jobs:
            from naspipe.truth.standalone import work

            with worker_pool(max(1, min(workers, len(jobs))), settings.kernels) as pool:
                for _ in results(pool, work, jobs):
                    if bar is not None:
                        bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if pending(d, settings):
        return None
    truth = assemble(d)
    write_table(d, truth)  # also repairs a table or CSV that was deleted, truncated or edited since
    return truth


_HELD: set[str] = set()  # the truth folders this process holds the lock of (``holding`` is re-entrant)


@contextmanager
def holding(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock (``naspipe.runfolder.runlock``: ``.naspipe.lock``, released however this process
    ends) for the block, creating the folder: a second builder of one truth folder is refused in one line naming
    the builder that holds it (TruthError), instead of training the same entries twice or, in the moment the first
    one creates the folder, being told the folder holds no truth. Re-entrant within this process."""
    from naspipe.runfolder.runlock import RunLocked, acquire, release

    key = os.path.realpath(folder)
    if key in _HELD:
        yield
        return
    try:
        fd = acquire(folder)
    except RunLocked as e:
        raise TruthError(f"{folder} is in use by another naspipe truth build{e.holder}: wait for it to end (the "
                         "same command then continues the build), or build in another folder") from None
    _HELD.add(key)
    try:
        yield
    finally:
        _HELD.discard(key)
        release(folder, fd)


def check_entries_writable(folder: Path) -> None:
    """TruthError (one line naming the folder) when the entries cannot be stored in ``folder``'s ``entries/``
    (read-only, on a file system that takes no files): said before any entry trains, not as a worker's traceback
    after the first one."""
    from naspipe.fileio.atomic import check_writable

    entries = folder / ENTRIES
    try:
        check_writable(entries, "the truth's entries folder")
    except OSError as e:
        raise TruthError(f"{e}; the finished entries are stored there (make it writable, or build the truth in "
                         "another folder)") from None


@contextmanager
def worker_pool(n: int, kind: str) -> Iterator[Any]:
    """A pool of ``n`` spawned workers that compute under kernels ``kind``, each started by ``start_worker``, without
    the caller's ``__main__`` run again in them (``naspipe.lifecycle.mainless``: a script without a main guard used
    to start a build of its own in every worker, each refused as the folder was held), deaf to Ctrl-C from their
    start (``children_start_deaf_to_ctrl_c``: a worker still starting printed its traceback). Spawned, not forked from a
    fork server: a fork server's children keep it alive after the build dies, and take its environment as it was
    when it started (a review found both)."""
    import torch.multiprocessing as mp

    from naspipe.lifecycle import kernels
    from naspipe.lifecycle.mainless import main_not_run_again
    from naspipe.runtime.processes.signals import children_start_deaf_to_ctrl_c

    with kernels.launching(kind), main_not_run_again(), children_start_deaf_to_ctrl_c():
        pool = mp.get_context("spawn").Pool(n, initializer=start_worker, initargs=(os.getpid(), kind))
    with pool:
        yield pool


def results(pool: Any, fn: Any, jobs: list[Any], *, ordered: bool = False, poll_s: float = 1.0) -> Iterator[Any]:
    """``pool.imap_unordered(fn, jobs)`` (``imap`` when ``ordered``), ending in a TruthError when one of the pool's
    workers dies (killed, out of memory): the pool would start another and wait forever for the entry the dead one
    held. A worker never ends on its own, so one of them gone from this process's children is one that died."""
    import multiprocessing as mp

    workers = {p.pid for p in mp.active_children() if "PoolWorker" in p.name}
    it = pool.imap(fn, jobs) if ordered else pool.imap_unordered(fn, jobs)
    while True:
        try:
            yield it.next(timeout=poll_s)
        except StopIteration:
            return
        except mp.TimeoutError:
            if not workers <= {p.pid for p in mp.active_children()}:
                raise TruthError("a worker process died while it trained (killed, or out of memory?); the entries "
                                 "in flight are not stored: the same command continues the build") from None


def start_worker(parent: int, kind: str = "native") -> None:
    """A pool worker's start (this module, which the spawned worker imports to find this function, imports no
    torch): first, it ignores Ctrl-C (the build's to report and act on); on Linux, the worker is killed when the
    build process that started it (``parent``) dies, however it dies, so a killed build leaves no worker; then torch
    and torch._dynamo as start-up imports (``naspipe.lifecycle.startup``) and ``standalone.init_worker``; it
    computes under the truth's kernels ``kind`` (inherited with its environment: checked before any entry)."""
    import signal

    # a terminal's Ctrl-C reaches the whole group: the build reports it in one line and ends the pool (SIGTERM);
    # a worker that took it too printed its KeyboardInterrupt traceback above that line (the pool starts it deaf,
    # and a worker the pool starts again to replace one is deaf from here)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the build died before the line above
            os._exit(1)
    from naspipe.lifecycle.startup import TRAINER, import_at_start

    import_at_start(*TRAINER)
    from naspipe.lifecycle import kernels
    from naspipe.truth.standalone import init_worker

    kernels.enter(kind)
    init_worker()
