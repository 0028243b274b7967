"""Ensembles of supernets: each architecture scored with the mean over runs that differ only in the seed.

Why it exists: one supernet's ranking moves with its seed (floor (b)); averaging the inherited-weight scores of a
few supernets equal but the seed is the cheapest way to buy that noise down, and ``naspipe rank RUN --ensemble RUN2
...`` says how much it buys against the truth. The runs are checked to differ in the seed alone
(``naspipe.ranking.compare.check_seed_runs``: another optimizer or learning rate is no ensemble of seeds, the same
run twice is one run); the accuracy and the loss of each architecture are each the plain mean over the runs, in the
order given. Averaging the last checkpoints of one run (``--ensemble-last``) is not offered: a run keeps only its
newest complete checkpoint (``naspipe.runtime.checkpoint.mark_complete`` deletes the older ones).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from naspipe.errors import UserError
from naspipe.ranking.folders import run_folders

if TYPE_CHECKING:
    from naspipe.ranking.compare import Scored

FLAG = "--ensemble"


def ensemble_runs(ensemble: Sequence[str | Path]) -> list[str | Path]:
    """``ensemble`` as a list of run folders (``naspipe.ranking.folders.run_folders``: one line for one path or
    anything but paths); that they are equal to the run ranked but the seed, ``rank`` checks (``check_seed_runs``,
    with ``FLAG``)."""
    return run_folders("ensemble", ensemble)


def mean_scored(members: Sequence[Scored]) -> Scored:
    """One ``Scored`` whose accuracy and loss per architecture are the means over ``members`` (two or more, of the
    same architectures); it names the first and keeps every member (``members``)."""
    if len(members) < 2:
        raise UserError(f"an ensemble is the mean of two runs or more, got {len(members)}")
    n = {len(m.accuracy) for m in members}
    if len(n) != 1:
        raise UserError(f"the ensemble's runs scored different numbers of architectures ({sorted(n)})")
    k = len(members)
    acc = [sum(col) / k for col in zip(*(m.accuracy for m in members), strict=True)]
    loss = [sum(col) / k for col in zip(*(m.loss for m in members), strict=True)]
    return dataclasses.replace(members[0], accuracy=acc, loss=loss, members=tuple(members))
