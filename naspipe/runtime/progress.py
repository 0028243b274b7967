"""The training progress bar on stderr, counting subnets from where the run starts.

Why it exists: ``naspipe train`` (the launcher) and the torchrun entry point both show one bar fed by stage 0's
"progress" reports (subnets written by this invocation). A resumed run starts at its checkpoint's subnet, so the
bar starts there (``15/40``) and ends at the total (``40/40``) rather than counting 0..25 of 40. Its rate counts
the wall clock since the bar appeared, start-up included, and says so, unlike the summary's rate (training
time only).
"""

from __future__ import annotations

import sys
from typing import IO, Any

RATE_LABEL = "incl. start-up"
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt} " + RATE_LABEL + "]"


class ProgressBar:
    """A bar over ``total`` subnets that starts at ``start`` (a resumed run's checkpoint); ``enabled=False``
    shows nothing. ``advance(written)`` takes the count this invocation wrote so far."""

    def __init__(self, total: int, desc: str, enabled: bool = True, start: int = 0, file: IO[str] | None = None):
        self.start = int(start)
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm

            if self.start:
                desc = f"{desc}, resumed at {self.start}"
            self.bar = tqdm(total=total, initial=self.start, desc=desc, unit="subnet",
                            file=file if file is not None else sys.stderr, leave=True, bar_format=BAR_FORMAT)

    def advance(self, written: int) -> None:
        if self.bar is not None:
            self.bar.update(self.start + int(written) - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def for_config(cfg: Any, enabled: bool | None = None) -> ProgressBar:
    """The bar of a ``TrainConfig``: its policy, space and stages, from its resume position."""
    return ProgressBar(cfg.n, f"{cfg.policy} {cfg.space.name} P={cfg.stages}",
                       cfg.progress if enabled is None else enabled, start=int(getattr(cfg, "start", 0) or 0))
