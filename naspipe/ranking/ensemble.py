"""Ensembles of supernets: each architecture scored with the mean over runs that differ only in the seed, or over
the last supernets of one run.

Why it exists: one supernet's ranking moves with its seed (floor (b)); averaging the inherited-weight scores of a
few supernets equal but the seed is the cheapest way to buy that noise down, and ``naspipe rank RUN --ensemble RUN2
...`` says how much it buys against the truth. The runs are checked to differ in the seed alone
(``naspipe.ranking.seed_runs.check_seed_runs``: another optimizer or learning rate is no ensemble of seeds, the same
run twice is one run); the accuracy and the loss of each architecture are each the plain mean over the runs, in the
order given.

``naspipe rank RUN --ensemble-last N`` averages instead the last ``N`` supernets of the one run RUN, at no extra
training: its final weights (after all its subnets) and its ``N - 1`` newest complete checkpoints before them (the
supernets after the subnets ``< c`` for each position ``c``; a run keeps its ``K`` newest when trained with
``naspipe train --checkpoint-every E --keep-checkpoints K``, so ``N <= K + 1``). ``last_supernets`` finds them and
refuses, before any model loads: ``N < 2``; a run with fewer than ``N - 1`` complete checkpoints (``naspipe
reference`` writes none); a checkpoint whose fingerprint is not the run's (another seed, space or length); in a
few-shot run, a checkpoint before the warm-up's end (its sub-supernets were not split yet). Each supernet is
scored as the final weights are (parameters only: ``naspipe.models.weights.load_weights``), and the mean is
``mean_scored``'s, the final weights first.

``naspipe search RUN --ensemble RUN2 ...`` and ``--ensemble-last N`` (``search_ensemble``) score each candidate
subnet the same way, so the search's ranking and its pick come from the ensemble: the flags are checked as rank
checks them (``check_ensemble``), and ``naspipe.search.run.search_run`` averages the supernets' evaluators
(``mean_evaluator``, ``mean_scored``'s arithmetic).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe.errors import UserError
from naspipe.ranking.folders import check_folder, run_folders
from naspipe.ranking.seed_runs import check_seed_runs

if TYPE_CHECKING:
    from naspipe.ranking.compare import Scored
    from naspipe.search.result import SearchResult

FLAG = "--ensemble"
LAST_FLAG = "--ensemble-last"
AFTER = "after_subnets"  # a member's config in an ensemble of one run's last supernets: the subnets it had trained


@dataclasses.dataclass(frozen=True)
class LastSupernets:
    """The last supernets of ``run`` that ``--ensemble-last`` averages: its final weights, after ``subnets``, and
    the checkpoints at ``checkpoints`` (positions, newest first)."""

    run: str
    subnets: int
    checkpoints: tuple[int, ...]


def last_supernets(run: str | Path, n: Any) -> LastSupernets:
    """The final weights and the ``n - 1`` newest complete checkpoints of ``run`` (see the module); UserError (one
    line, naming ``LAST_FLAG``) for what cannot be averaged. Reads sidecars and ``run.json``, no weights."""
    from naspipe.inputs.wholes import whole
    from naspipe.runfolder import runs
    from naspipe.runtime.checkpoint import CheckpointError, complete_positions, position_dir, read_sidecar, root_of
    from naspipe.spaces.few_shot import recorded_split

    n = whole(LAST_FLAG, n, 0)
    if n < 2:
        raise UserError(f"{LAST_FLAG} {n}: an ensemble is the mean of two supernets or more (the final weights and "
                        "N - 1 checkpoints); give N >= 2")
    data = runs.read_run(run)  # RunFileError (a ValueError) names a malformed file
    ident = dict(data["identity"]) if data is not None else {}
    try:
        subnets = int(ident["subnets"])
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{LAST_FLAG}: {run} records no run.json with its length (an older or copied run folder); "
                        "its checkpoints cannot be told to be its own") from None
    kept = complete_positions(root_of(run))
    if len(kept) < n - 1:
        at = f" (after {', '.join(map(str, sorted(kept)))} subnets)" if kept else ""
        options = "--checkpoint-every E" + (f" --keep-checkpoints {n - 1} (or more)" if n > 2 else "")
        how = (f"naspipe reference writes none: train it with naspipe train {options}"
               if data is not None and data["kind"] == "reference" else f"train it with {options}")
        newest = "newest checkpoint" if n == 2 else f"{n - 1} newest checkpoints"
        raise UserError(f"{LAST_FLAG} {n} averages the final weights of {run} and its {newest}; it keeps "
                        f"{len(kept)} complete checkpoint{'' if len(kept) == 1 else 's'}{at}: {how}")
    chosen = tuple(kept[: n - 1])
    for c in chosen:
        side = position_dir(root_of(run), c) / "stage0.json"
        try:
            fp = read_sidecar(side)[0]
        except (OSError, CheckpointError) as e:
            raise UserError(f"{LAST_FLAG}: {e}") from None
        split = runs.FEW_SHOT in ident  # (a few-shot checkpoint records the expanded space's digest, and the split)
        for key in ("seed", "subnets", runs.FEW_SHOT if split else "space_sha256"):
            if key in ident and fp.get(key) != ident[key]:
                raise UserError(f"{LAST_FLAG}: the checkpoint {str(side.parent)!r} was taken by another run than "
                                f"{run} ({key} {fp.get(key)!r} vs the run's {ident[key]!r})")
        if not 0 < c < subnets:
            raise UserError(f"{LAST_FLAG}: the checkpoint {str(side.parent)!r} is at subnet {c}, outside the run's "
                            f"{subnets} subnets")
    split = recorded_split(ident.get(runs.FEW_SHOT))  # (FewShotError, one line, for a malformed record)
    if split is not None and (early := [c for c in chosen if c < split[1]]):
        later = sum(c >= split[1] for c in kept)
        can = (f"average at most {1 + later} supernets" if later else
               "it keeps no checkpoint at or after that end to average with its final weights")
        raise UserError(f"{LAST_FLAG} {n}: the checkpoint after {early[0]} subnets of few-shot run {run} is before "
                        f"its warm-up's end ({split[1]}): its sub-supernets were not split yet; {can}")
    return LastSupernets(str(run), subnets, chosen)


def ensemble_runs(ensemble: Sequence[str | Path]) -> list[str | Path]:
    """``ensemble`` as a list of run folders (``naspipe.ranking.folders.run_folders``: one line for one path or
    anything but paths); that they are equal to the run ranked but the seed, ``rank`` checks (``check_seed_runs``,
    with ``FLAG``)."""
    return run_folders("ensemble", ensemble)


def check_ensemble(run: str | Path, ensemble: Sequence[str | Path],
                   last: Any) -> tuple[list[str | Path], LastSupernets | None]:
    """What ``--ensemble`` (``ensemble``) or ``--ensemble-last`` (``last``; 0 or None: off) ask of ``run``, checked
    before any model loads, for ``naspipe rank`` and ``naspipe search`` alike: the runs (``ensemble_runs``; equal to
    ``run`` but the seed, ``check_seed_runs`` naming ``FLAG``) and the last supernets (``last_supernets``, None when
    off). UserError (one line) for what cannot be averaged, and for both flags together."""
    ensemble = ensemble_runs(ensemble)
    off = last in (0, None)
    if ensemble and not off:
        raise UserError(f"{LAST_FLAG} and {FLAG} cannot be combined: average one run's last supernets or runs equal "
                        "but the seed, not both")
    if ensemble:
        check_seed_runs([run, *ensemble], flag=FLAG)
    return ensemble, None if off else last_supernets(run, last)


def search_ensemble(run_dir: str | Path, *, ensemble: Sequence[str | Path] = (), ensemble_last: int = 0,
                    **options: Any) -> SearchResult:
    """``naspipe search RUN --ensemble RUN2 ...`` or ``--ensemble-last N``: ``naspipe.search.search_run`` of
    ``run_dir`` (``options``: its arguments) with each subnet scored by the mean over ``run_dir`` and ``ensemble``
    (runs equal to it but the seed), or over its last ``ensemble_last`` supernets (its final weights first, then
    its checkpoints, newest first); refused as ``naspipe rank`` refuses them (``check_ensemble``), before any
    model loads. Neither: a plain ``search_run``."""
    from naspipe.search.run import Member, search_run

    check_folder("run", run_dir)
    ensemble, last = check_ensemble(run_dir, ensemble, ensemble_last)
    if last is not None:
        members = [Member(run_dir, None, last.subnets), *(Member(run_dir, c, c) for c in last.checkpoints)]
    else:
        members = [Member(r) for r in (run_dir, *ensemble)] if ensemble else []
    return search_run(run_dir, members=members, **options)


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
