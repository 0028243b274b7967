"""Background jobs for notebooks and benchmarks: training and the reference, each in a thread.

Why it exists: a notebook cell must return while a run trains, so the live monitor (``naspipe.viz.LiveMonitor``)
can follow the run's ``events.jsonl``; the reference trainer can overlap with a pipeline run's start-up. These
start runtime work, so they live here and not in ``naspipe.viz`` (which only draws).

* ``TrainJob`` / ``start_training``: ``naspipe.runtime.train(config)`` in a background thread;
* ``write_reference(config, out)``: the independent sequential reference trainer on a config's sequence, written
  as a run directory; ``start_reference`` runs it in the background;
* ``Job``: any ``fn(*args)`` in a daemon thread, ``wait(timeout)`` returns its value or re-raises.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from naspipe.runfolder import runs


def write_reference(config: Any, out: str | Path, progress: bool = False) -> Path:
    """Train ``config``'s sequence with the sequential reference trainer; write losses and params to ``out``.
    With ``config.replicas`` R > 1 it is ``naspipe reference --replicas R`` (the shards' gradients combined as
    the run's replicas combine them), the reference such a run verifies against. ``out`` may hold an earlier
    reference (replaced: only its files) and nothing else a run writes (``naspipe.runtime.rundir.ConfigError``)."""
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runtime.rundir import check_out_dir, save_reference_run

    check_out_dir(Path(out), overwrite=False, kind="reference")  # before training, not after
    ref = train_reference(config.space, config.stream(), config.seed, config.shared, optimizer=config.optimizer,
                          lr=config.lr, progress=progress, threads=getattr(config, "threads", 1),
                          replicas=getattr(config, "replicas", 1))
    return save_reference_run(Path(out), lambda folder: ref.save(folder, metrics={}))



class Job:
    """``fn(*args)`` running in a background (daemon) thread; ``wait()`` returns its value or re-raises."""

    def __init__(self, fn: Any, *args: Any, name: str = "naspipe-job"):
        self.result: Any = None
        self.error: BaseException | None = None
        self._fn, self._args = fn, args
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self.result = self._fn(*self._args)
        except BaseException as e:  # noqa: BLE001 - re-raised by wait()
            self.error = e

    def start(self) -> Job:
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


def _train(config: Any) -> Any:
    from naspipe.runtime import train

    return train(config)


class TrainJob(Job):
    """``naspipe.runtime.train(config)`` running in a background thread.

    ``events`` is the run's live ``events.jsonl`` (give it to ``LiveMonitor.follow``, with the job as
    ``until``: the monitor stops when the job ends); ``wait()`` returns the ``RunResult`` or re-raises the
    training error.
    """

    def __init__(self, config: Any):
        super().__init__(_train, config, name="naspipe-train")
        self.config = config
        self.events = Path(config.out) / runs.EVENTS

    def start(self) -> TrainJob:
        out = Path(self.config.out)
        if getattr(self.config, "overwrite", False) and out.is_dir():  # an earlier run's files would end the
            from naspipe.runfolder.runlock import RunLocked, locked  # monitor at once; never while another run writes

            try:
                with locked(out):
                    for name in (runs.EVENTS, runs.STATUS):
                        (out / name).unlink(missing_ok=True)
            except RunLocked:
                pass  # train() refuses the folder: the job's wait() raises it
        super().start()
        return self


def start_training(config: Any) -> TrainJob:
    """Start ``train(config)`` in a background thread and return its ``TrainJob``."""
    return TrainJob(config).start()


def start_reference(config: Any, out: str | Path) -> Job:
    """``write_reference(config, out)`` in a background thread (it overlaps with a pipeline run's start-up);
    ``wait()`` returns the reference directory."""
    return Job(write_reference, config, out, name="naspipe-reference").start()


__all__ = ["Job", "TrainJob", "start_reference", "start_training", "write_reference"]
