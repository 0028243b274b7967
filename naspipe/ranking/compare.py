"""``naspipe.rank``: how well a trained supernet ranks the architectures of a ground truth.

Why it exists: two runs agreeing bit for bit says nothing about whether their ranking is right. This scores
each of the truth's architectures with the run's inherited weights (the evaluation ``naspipe search`` uses:
``make_evaluator`` on the held-out batches), compares with the truth's stand-alone accuracy (mean over its
seeds), and prints every statistic beside its noise floors: (a) the truth's own seed-to-seed tau; (b) how much
supernets that differ only in the seed (``seeds``) disagree with each other and with the truth. A second run
(``against``) is compared with the first, and the difference of their taus is called a difference only where
its interval clears the seed band.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.inputs.wholes import whole
from naspipe.ranking.folders import check_folder, run_folders
from naspipe.ranking.seed_runs import check_seed_runs, identity_of
from naspipe.ranking.stats import (
    MIN_ARCHS,
    RESAMPLES,
    Agreement,
    Estimate,
    TooFewArchitectures,
    agreement,
    difference,
    kendall,
    pairwise_tau,
    seed_floor,
    verdict,
)
from naspipe.truth.records import Truth, TruthError, check_archs, load, space_of


@dataclass(frozen=True)
class Scored:
    """A run's estimate for each of the truth's architectures (accuracy and loss, in the truth's order)."""

    run: str
    accuracy: list[float]
    loss: list[float]
    config: dict[str, Any]
    members: tuple[Scored, ...] = ()  # an ensemble's runs (``naspipe.ranking.ensemble``): the scores are their mean

    def describe(self) -> str:
        """The run, or the runs (or one run's last supernets) an ensemble averaged."""
        from naspipe.search.result import ensemble_text

        return ensemble_text([m.run for m in self.members], self.after_subnets()) if self.members else self.run

    def after_subnets(self) -> list[int]:
        """An ensemble of one run's last supernets (``--ensemble-last``): the subnets each member had trained, the
        final weights first; empty otherwise."""
        from naspipe.ranking.ensemble import AFTER

        return [int(m.config[AFTER]) for m in self.members] if self.members and all(
            AFTER in m.config for m in self.members) else []


@dataclass(frozen=True)
class SeedRuns:
    """Supernets equal but the seed (``seeds``): floor (b), how much they disagree with each other, and the seed
    band, how far their taus against the truth spread."""

    runs: tuple[Scored, ...]  # two or more
    floor: Estimate  # mean Kendall tau over every pair of them
    taus: tuple[float, ...]  # each one's Kendall tau against the truth, in the order of ``runs``

    @property
    def band(self) -> float:
        """The largest difference of tau against the truth that a change of supernet seed alone produced."""
        return max((abs(a - b) for a, b in combinations(self.taus, 2)), default=0.0)


@dataclass(frozen=True)
class Against:
    """A second run (``against``) compared with the first and with the truth."""

    run: Scored
    vs_truth: Agreement
    run_to_run: Estimate  # Kendall tau between the two runs' scores
    tau_difference: Estimate  # tau(truth, first) - tau(truth, this), paired bootstrap


@dataclass(frozen=True)
class RankReport:
    """What ``rank`` finds: the run against the truth, beside floor (a) (None: a truth of one seed) and, where
    given, the seed runs (floor (b), the seed band) and the second run."""

    truth: Truth
    run: Scored
    vs_truth: Agreement
    floor_truth: Estimate | None
    seeds: SeedRuns | None = None
    against: Against | None = None
    wall_s: float = 0.0

    @property
    def seed_band(self) -> float:
        """``seeds``' band; 0 without seed runs."""
        return self.seeds.band if self.seeds is not None else 0.0

    def verdict(self) -> str | None:
        if self.against is None:
            return None
        return verdict(self.against.tau_difference, self.seed_band)

    def per_architecture(self) -> list[dict[str, Any]]:
        """The numbers every statistic is computed from, one row per architecture in the truth's order: the
        truth's mean accuracy (and per seed), the run's accuracy and loss (and ``--against``'s, ``--seeds``')."""
        tr = self.truth
        rows = []
        for i, a in enumerate(tr.archs):
            row: dict[str, Any] = {"arch": list(a), "name": tr.names[a], "truth_accuracy": tr.mean_accuracy(a),
                                   "truth_accuracy_per_seed": list(tr.accuracy[a]),
                                   "run_accuracy": self.run.accuracy[i], "run_loss": self.run.loss[i]}
            if self.against is not None:
                other = self.against.run
                row["against_accuracy"], row["against_loss"] = other.accuracy[i], other.loss[i]
            if self.seeds is not None:
                row["seeds_accuracy"] = [s.accuracy[i] for s in self.seeds.runs]
            if self.run.members:
                row["ensemble_accuracy"] = [m.accuracy[i] for m in self.run.members]
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (every number finite: the scores are checked, an interval's non-finite bound is None)."""
        from naspipe.search.result import ensemble_json

        t = self.truth.settings
        pick = self.truth.archs[self.vs_truth.pick]
        seeds = self.seeds
        out: dict[str, Any] = {
            "truth": {"space": t.space, "space_digest": t.space_digest, "steps": t.steps, "seeds": list(t.seeds),
                      "architectures": len(t.archs), "best_accuracy": max(self.truth.mean_accuracy(a)
                                                                          for a in t.archs)},
            "run": self.run.run, **ensemble_json([m.run for m in self.run.members], self.run.after_subnets()),
            "vs_truth": self.vs_truth.to_dict(),
            "pick": {"arch": list(pick), "name": self.truth.names[pick],
                     "truth_accuracy": self.truth.mean_accuracy(pick)},
            "floors": {"truth_seed_vs_seed": self.floor_truth.to_dict() if self.floor_truth else None,
                       "supernet_seed_vs_seed": seeds.floor.to_dict() if seeds else None,
                       "supernet_seeds": [s.run for s in seeds.runs] if seeds else [],
                       "supernet_seed_taus": list(seeds.taus) if seeds else [],
                       "seed_band": self.seed_band},
            "architectures": self.per_architecture(),
            "wall_s": self.wall_s,
        }
        if (b := self.against) is not None:
            out["against"] = {"run": b.run.run, "vs_truth": b.vs_truth.to_dict(),
                              "run_to_run_tau": b.run_to_run.to_dict(),
                              "tau_difference": b.tau_difference.to_dict(), "verdict": self.verdict(),
                              "same_pick": b.vs_truth.pick == self.vs_truth.pick}
        return out

    def text(self) -> str:
        t = self.truth.settings
        best = max(self.truth.mean_accuracy(a) for a in t.archs)
        pick = self.truth.archs[self.vs_truth.pick]
        a = self.vs_truth
        n_seeds = f"{len(t.seeds)} seed{'' if len(t.seeds) == 1 else 's'}"
        lines = [f"truth: {t.space} ({t.space_digest[:12]}), {len(t.archs)} architectures x {n_seeds}, "
                 f"{t.steps} steps; best stand-alone accuracy {best:.4f}",
                 f"run:   {self.run.describe()}",
                 "                         value [95% bootstrap interval over architectures]",
                 f"  Kendall tau            {a.kendall.text()}",
                 f"  Spearman rho           {a.spearman.text()}",
                 f"  top-10% overlap        {a.top.text()}",
                 f"  regret of the pick     {a.regret.text(4)}  (pick {self.truth.names[pick]}: stand-alone "
                 f"{self.truth.mean_accuracy(pick):.4f}{_ties(a.pick_ties)})",
                 "noise floors (Kendall tau):"]
        ft = self.floor_truth.text() if self.floor_truth else "n/a (one seed)"
        lines.append(f"  (a) truth seed vs seed      {ft}")
        if (seeds := self.seeds) is not None:
            lines.append(f"  (b) supernet seed vs seed   {seeds.floor.text()}  ({len(seeds.runs)} runs; their tau "
                         f"vs truth {', '.join(f'{x:.2f}' for x in seeds.taus)}: band +-{seeds.band:.2f})")
        else:
            lines.append("  (b) supernet seed vs seed   not measured (pass --seeds RUN RUN ... of supernets equal "
                         "but the seed)")
        lines.append(f"  (c) this run vs truth       {a.kendall.text()}")
        if (other := self.against) is not None:
            b = other.vs_truth
            same = "same pick" if b.pick == a.pick else f"other pick ({self.truth.names[self.truth.archs[b.pick]]})"
            same += _ties(b.pick_ties)
            lines += [f"against: {other.run.run}",
                      f"  its Kendall tau vs truth {b.kendall.text()}, regret {b.regret.text(4)}, {same}",
                      f"  run vs run Kendall tau   {other.run_to_run.text()}"
                      + (f" (seed floor {seeds.floor.text()})" if seeds else ""),
                      f"  tau difference           {other.tau_difference.text()}: {self.verdict()}"
                      + ("" if seeds else " (no seed band: pass --seeds)")]
        return "\n".join(lines)


def _ties(n: int) -> str:
    """What the text says of a pick the run scores exactly as ``n`` other architectures (none: nothing)."""
    if not n:
        return ""
    return (f"; tied with {n} other architecture{'s' if n > 1 else ''} the run scores the same: the first in the "
            "truth's order")


def check_against(run: str | Path, against: str | Path) -> None:
    """UserError when ``against`` is ``run`` itself (the same folder, through links) or a copy of it (the same
    kind, identity and recorded config): its scores are the run's own, bit for bit, and a zero difference
    'within seed noise' would say nothing."""
    from naspipe.runfolder import runs
    from naspipe.search.run import read_config

    if os.path.realpath(run) == os.path.realpath(against):
        raise UserError(f"--against {against} is the run itself ({run}); compare another run")

    def what(d: str | Path) -> tuple[Any, ...]:
        data = runs.read_run(d)
        return (data and data["kind"], identity_of(Path(d)), read_config(d))

    if what(run) == what(against):
        raise UserError(f"--against {against} is the same run as {run} (a copy, or the same configuration run "
                        "again: the same kind, identity and config, so the same numbers bit for bit); compare "
                        "another run")


def score_run(run_dir: str | Path, truth: Truth, space: Any = None, heldout: int | None = None, *,
              space_given: bool = True, checkpoint: int | None = None) -> Scored:
    """The run's accuracy and loss for each of the truth's architectures (``checkpoint``: with the supernet of its
    checkpoint at that position instead of its final weights, ``naspipe.runtime.checkpoint.saved_models``; the
    ``Scored`` is named by the checkpoint's folder). TruthError if it trained another space
    (by name or, where the run records it, by digest), if an architecture of the truth is not one of its space,
    or if its scores rank nothing (NaN or infinite: a diverged run; every architecture scored alike).
    ``space_given`` False: ``space`` is the truth's own, standing in for a run's space its name does not resolve
    (``_run_space``); then the run must record its space's digest (``run.json``), or the truth's space would vouch
    for itself (without it, a run of another space of the same name and no ``run.json`` would rank)."""
    from naspipe.models import heldout_batches
    from naspipe.search.run import load_trained_run, make_evaluator, read_config

    t = truth.settings
    d = Path(run_dir)
    name = str(read_config(d)["space"])
    if name != t.space:
        raise TruthError(f"{run_dir} trained space {name!r}; the truth is of space {t.space!r} "
                         f"({t.space_digest[:12]})")
    ident = identity_of(d)
    recorded = ident.get("space_sha256")
    if recorded is not None and recorded != t.space_digest:
        raise TruthError(f"{run_dir} trained space {name!r} ({str(recorded)[:12]}); the truth is of another space of "
                         f"that name ({t.space_digest[:12]}): the same name, another definition")
    if recorded is None and space is not None and not space_given:
        raise TruthError(f"{run_dir} records no digest of its space {name!r} (no run.json: an older or copied run "
                         "folder), so it cannot be told from another space of that name; pass the space it was "
                         "trained on with --space (checked against the truth's)")
    _check_behaviour(run_dir, ident, t)
    run = load_trained_run(run_dir, space, checkpoint=checkpoint)
    label = run.source
    if run.space.digest() != t.space_digest:
        raise TruthError(f"{run_dir} trained space {run.space.name!r} ({run.space.digest()[:12]}); the truth is of "
                         f"space {t.space!r} ({t.space_digest[:12]})")
    check_archs(run.space, truth.archs, f"the truth {truth.folder}" if truth.folder else "the truth")
    evaluate = make_evaluator(run.model, heldout_batches(run.space, heldout))
    scores = [evaluate(a) for a in truth.archs]
    acc, loss = [float(x["accuracy"]) for x in scores], [float(x["loss"]) for x in scores]
    bad = sum(not (math.isfinite(a) and math.isfinite(x)) for a, x in zip(acc, loss, strict=True))
    if bad:
        raise TruthError(f"{label}: the supernet's held-out accuracy or loss is NaN or infinite for {bad} of "
                         f"{len(acc)} architectures (a diverged run: see its losses.csv); it ranks nothing")
    if len(set(acc)) == 1:
        raise TruthError(f"{label}: the supernet scores every architecture at the same accuracy ({acc[0]:.4f}); "
                         "it ranks nothing")
    return Scored(label, acc, loss, run.config)


def _check_behaviour(run_dir: str | Path, ident: dict[str, Any], t: Any) -> None:
    """TruthError when the run and the truth both hold the digest of what the supernet computes
    (``naspipe.preflight.behaviour``), taken on the same kernels and CPU, and they differ: the supernet's code, or
    what it reads, changed between the truth and the run."""
    from naspipe.runfolder import runs

    have, want = ident.get(runs.BEHAVIOUR), t.behaviour_sha256
    if not have or not want or have == want or runs.machine_of(ident) != t.behaviour_on:
        return
    raise TruthError(f"{run_dir} trained another behaviour of supernet {t.space!r} than the truth was built with "
                     f"(behaviour {str(have)[:12]} vs {str(want)[:12]}: the same structure, another forward or "
                     "backward: what its code reads changed between the truth and the run); train the run with the "
                     "truth's code, or build the truth again")


def _run_space(run: str | Path, truth: Truth, truth_space: Any) -> Any:
    """The truth's recorded space, for a run of a space of that name that its name alone does not resolve (a space
    from a JSON file: ``UnknownSpace`` of that name); None otherwise (the run's own space is used, and checked
    against the truth). Reads the run's config, not its weights."""
    from naspipe.search.run import read_config
    from naspipe.spaces.space import SpaceError, UnknownSpace, resolve_space
    from naspipe.supernet.load import recorded_space

    if truth_space is None:
        return None
    name = str(read_config(run)["space"])
    if name != truth.settings.space:
        return None
    try:
        resolve_space(recorded_space(run, name))
    except UnknownSpace as e:
        return truth_space if e.name == name else None
    except SpaceError:  # (scoring the run refuses it, saying what to pass)
        return None
    return None


def _check_given_space(space: Any, tr: Truth) -> None:
    """TruthError when the space given (``--space``, ``space=``) is not the truth's (by digest): the runs are
    checked against the truth, so such a space is wrong whatever the runs trained; said naming both."""
    import naspipe.supernet  # noqa: F401 - registers the module:function resolver
    from naspipe.spaces.space import resolve_space

    sp = resolve_space(space)  # (a SpaceError, one line, for one that does not resolve)
    t = tr.settings
    if sp.digest() != t.space_digest:
        shown = repr(space) if isinstance(space, str) else f"supernet {sp.name!r}"
        raise TruthError(f"the space given, {shown} (space {sp.name!r}, {sp.digest()[:12]}), differs from the "
                         f"truth's space {t.space!r} ({t.space_digest[:12]}); give the truth's space with --space, "
                         "or none")


def check_truth_ranks(tr: Truth) -> None:
    """TruthError (one line) for a truth that cannot rank anything: every architecture at one accuracy, or (with
    two seeds or more) seeds that do not agree on the order at all (a collapsed or diverged training)."""
    target = [tr.mean_accuracy(a) for a in tr.archs]
    if len(set(target)) == 1:
        raise TruthError(f"the truth {tr.folder or ''} scores every architecture at the same accuracy "
                         f"({target[0]:.4f}); it ranks nothing")
    ties = max(target.count(v) for v in set(target))
    if ties > len(target) // 2:
        raise TruthError(f"the truth {tr.folder or ''} scores {ties} of its {len(target)} architectures at one "
                         "accuracy (a collapsed training: see its losses); it ranks too little to compare with")


def rank(run: str | Path, truth: str | Path | Truth, *, against: str | Path | None = None,
         seeds: Sequence[str | Path] = (), space: Any = None, heldout: int | None = None,
         resamples: int = RESAMPLES, ensemble: Sequence[str | Path] = (), ensemble_last: int = 0) -> RankReport:
    """Compare the supernet trained in ``run`` with ``truth`` (a folder or a loaded Truth); see the module. Every
    interval resamples the architectures ``resamples`` times.

    Refused before any model loads (ValueError, one line: ``TruthError`` for the truth): a ``run``, ``against``
    or seed run that is no path (named); ``seeds`` that are one path rather than a list, or runs that differ in
    more than the seed, from each other or from ``run``; ``against`` that is ``run`` itself or a copy of it; a
    ``heldout`` or ``resamples`` that is not a whole number >= 1; a truth of fewer than ``MIN_ARCHS`` architectures.

    ``ensemble``: runs equal to ``run`` but the seed; each architecture is scored with the mean over ``run`` and
    them (``naspipe.ranking.ensemble``; the seed runs are scored alone). ``ensemble_last`` N >= 2 (0: off): with the
    mean over the last N supernets of ``run``, its final weights and its N - 1 newest complete checkpoints
    (``naspipe.ranking.ensemble.last_supernets``: refused before any model loads when it keeps fewer, or with
    ``ensemble``)."""
    import time

    from naspipe.ranking.ensemble import AFTER, check_ensemble, mean_scored

    t0 = time.perf_counter()
    check_folder("run", run)
    if against is not None:
        check_folder("against", against)
    seeds = run_folders("seeds", seeds)
    if heldout is not None:
        heldout = whole("heldout", heldout, 1)
    resamples = whole("resamples", resamples, 1)
    if not isinstance(truth, Truth | str | os.PathLike):
        raise UserError(f"truth must be a truth folder (a path) or a loaded Truth (naspipe.truth.records.load), "
                        f"got {type(truth).__name__} {truth!r:.60}")
    tr = truth if isinstance(truth, Truth) else load(truth)
    if len(tr.archs) < MIN_ARCHS:
        raise TooFewArchitectures(f"the truth {tr.folder or ''} holds {len(tr.archs)} architecture"
                                  f"{'s' if len(tr.archs) != 1 else ''}: too few to rank (at least {MIN_ARCHS})")
    ensemble, last = check_ensemble(run, ensemble, ensemble_last)
    if seeds:
        check_seed_runs(seeds, run)
    if against is not None:
        check_against(run, against)
    truth_space = space_of(tr)  # TruthError: a space.json swapped or corrupt
    if truth_space is not None:
        check_archs(truth_space, tr.archs, f"the truth {tr.folder}")
    given = space is not None
    if given:
        _check_given_space(space, tr)
    else:
        space = _run_space(run, tr, truth_space)

    def score(r: str | Path) -> Scored:
        return score_run(r, tr, space, heldout, space_given=given)

    target = [tr.mean_accuracy(a) for a in tr.archs]
    single = score(run)  # (what the run is, and whether it was of this truth, first)
    scored = mean_scored([single, *(score(e) for e in ensemble)]) if ensemble else single
    if last is not None:
        def after(s: Scored, n: int) -> Scored:
            return dataclasses.replace(s, config={**s.config, AFTER: n})

        scored = mean_scored([after(single, last.subnets), *(
            after(score_run(run, tr, space, heldout, space_given=given, checkpoint=c), c) for c in last.checkpoints)])
    check_truth_ranks(tr)
    vs_truth = agreement(target, scored.accuracy, scored.loss, resamples=resamples)
    floor_truth = seed_floor(tr, resamples)
    seed_runs = None
    if seeds:
        same = os.path.realpath(run)
        runs = tuple(single if os.path.realpath(s) == same else score(s) for s in seeds)
        floor = pairwise_tau([s.accuracy for s in runs], resamples=resamples)
        assert floor is not None  # (check_seed_runs admits two runs or more)
        seed_runs = SeedRuns(runs, floor, tuple(kendall(target, s.accuracy) for s in runs))
    second = None
    if against is not None:
        other = score(against)
        run_to_run = pairwise_tau([scored.accuracy, other.accuracy], resamples=resamples)
        assert run_to_run is not None  # (two columns have a pair)
        second = Against(other, agreement(target, other.accuracy, other.loss, resamples=resamples), run_to_run,
                         difference(target, scored.accuracy, other.accuracy, resamples=resamples))
    return RankReport(tr, scored, vs_truth, floor_truth, seed_runs, second, time.perf_counter() - t0)
