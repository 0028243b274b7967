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

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.inputs.wholes import whole
from naspipe.ranking.stats import (
    MIN_ARCHS,
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


@dataclass
class Scored:
    """A run's estimate for each of the truth's architectures (accuracy and loss, in the truth's order)."""

    run: str
    accuracy: list[float]
    loss: list[float]
    config: dict[str, Any]


@dataclass
class RankReport:
    truth: Truth
    run: Scored
    vs_truth: Agreement
    floor_truth: Estimate | None
    against: Scored | None = None
    against_vs_truth: Agreement | None = None
    run_to_run: Estimate | None = None
    tau_difference: Estimate | None = None
    seeds: list[Scored] = field(default_factory=list)
    floor_runs: Estimate | None = None
    seed_taus: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def seed_band(self) -> float:
        """The largest difference of tau against the truth that a change of supernet seed alone produced."""
        return max((abs(a - b) for a, b in combinations(self.seed_taus, 2)), default=0.0)

    def verdict(self) -> str | None:
        if self.tau_difference is None:
            return None
        return verdict(self.tau_difference, self.seed_band)

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
                row["against_accuracy"], row["against_loss"] = self.against.accuracy[i], self.against.loss[i]
            if self.seeds:
                row["seeds_accuracy"] = [s.accuracy[i] for s in self.seeds]
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (every number finite: the scores are checked, an interval's non-finite bound is None)."""
        t = self.truth.settings
        pick = self.truth.archs[self.vs_truth.pick]
        out: dict[str, Any] = {
            "truth": {"space": t.space, "space_digest": t.space_digest, "steps": t.steps, "seeds": list(t.seeds),
                      "architectures": len(t.archs), "best_accuracy": max(self.truth.mean_accuracy(a)
                                                                          for a in t.archs)},
            "run": self.run.run, "vs_truth": self.vs_truth.to_dict(),
            "pick": {"arch": list(pick), "name": self.truth.names[pick],
                     "truth_accuracy": self.truth.mean_accuracy(pick)},
            "floors": {"truth_seed_vs_seed": self.floor_truth.to_dict() if self.floor_truth else None,
                       "supernet_seed_vs_seed": self.floor_runs.to_dict() if self.floor_runs else None,
                       "supernet_seeds": [s.run for s in self.seeds], "supernet_seed_taus": self.seed_taus,
                       "seed_band": self.seed_band},
            "architectures": self.per_architecture(),
            "wall_s": self.wall_s,
        }
        if self.against is not None:
            assert self.against_vs_truth is not None and self.run_to_run and self.tau_difference
            out["against"] = {"run": self.against.run, "vs_truth": self.against_vs_truth.to_dict(),
                              "run_to_run_tau": self.run_to_run.to_dict(),
                              "tau_difference": self.tau_difference.to_dict(), "verdict": self.verdict(),
                              "same_pick": self.against_vs_truth.pick == self.vs_truth.pick}
        return out

    def text(self) -> str:
        t = self.truth.settings
        best = max(self.truth.mean_accuracy(a) for a in t.archs)
        pick = self.truth.archs[self.vs_truth.pick]
        a = self.vs_truth
        lines = [f"truth: {t.space} ({t.space_digest[:12]}), {len(t.archs)} architectures x {len(t.seeds)} seeds, "
                 f"{t.steps} steps; best stand-alone accuracy {best:.4f}",
                 f"run:   {self.run.run}",
                 "                         value [95% bootstrap interval over architectures]",
                 f"  Kendall tau            {a.kendall.text()}",
                 f"  Spearman rho           {a.spearman.text()}",
                 f"  top-10% overlap        {a.top.text()}",
                 f"  regret of the pick     {a.regret.text(4)}  (pick {self.truth.names[pick]}: stand-alone "
                 f"{self.truth.mean_accuracy(pick):.4f}{_ties(a.pick_ties)})",
                 "noise floors (Kendall tau):"]
        ft = self.floor_truth.text() if self.floor_truth else "n/a (one seed)"
        lines.append(f"  (a) truth seed vs seed      {ft}")
        if self.floor_runs is not None:
            lines.append(f"  (b) supernet seed vs seed   {self.floor_runs.text()}  ({len(self.seeds)} runs; their tau "
                         f"vs truth {', '.join(f'{x:.2f}' for x in self.seed_taus)}: band +-{self.seed_band:.2f})")
        else:
            lines.append("  (b) supernet seed vs seed   not measured (pass --seeds RUN RUN ... of supernets equal "
                         "but the seed)")
        lines.append(f"  (c) this run vs truth       {a.kendall.text()}")
        if self.against is not None:
            b = self.against_vs_truth
            assert b is not None and self.run_to_run is not None and self.tau_difference is not None
            same = "same pick" if b.pick == a.pick else f"other pick ({self.truth.names[self.truth.archs[b.pick]]})"
            same += _ties(b.pick_ties)
            lines += [f"against: {self.against.run}",
                      f"  its Kendall tau vs truth {b.kendall.text()}, regret {b.regret.text(4)}, {same}",
                      f"  run vs run Kendall tau   {self.run_to_run.text()}"
                      + (f" (seed floor {self.floor_runs.value:.2f})" if self.floor_runs else ""),
                      f"  tau difference           {self.tau_difference.text()}: {self.verdict()}"
                      + ("" if self.seeds else " (no seed band: pass --seeds)")]
        return "\n".join(lines)


def _ties(n: int) -> str:
    """What the text says of a pick the run scores exactly as ``n`` other architectures (none: nothing)."""
    if not n:
        return ""
    return (f"; tied with {n} other architecture{'s' if n > 1 else ''} the run scores the same: the first in the "
            "truth's order")


def _identity(run_dir: Path) -> dict[str, Any]:
    """What decides a run's numbers: its ``run.json`` identity, or (a run without one) its recorded config."""
    from naspipe.runfolder import runs
    from naspipe.search.run import _read_config

    data = runs.read_run(run_dir)  # RunFileError (a ValueError) names a malformed file
    return dict(data["identity"]) if data is not None else dict(_read_config(run_dir))


# what a change of the supernet's seed changes in a run's identity (the seed, and the subnet sequence it draws)
SEED_DERIVED = ("seed", "sequence_sha256", "subnets_sha256")


def check_seed_runs(seeds: Sequence[str | Path]) -> None:
    """``seeds`` are two or more runs equal in everything but the seed, each of another seed (ValueError naming
    the runs and the field that differs)."""
    from naspipe.runfolder import runs

    if len(seeds) < 2:
        raise UserError(f"--seeds needs two or more runs equal but the seed (got {len(seeds)})")
    ids = [_identity(Path(s)) for s in seeds]
    first, a = seeds[0], ids[0]
    for s, b in zip(seeds[1:], ids[1:], strict=True):
        diffs = [d for d in runs.differences(a, b) if d[0] not in SEED_DERIVED]
        sampled = a.get("sampler") is not None and b.get("sampler") is not None  # None: a stream given directly
        if sampled and a["sampler"] != b["sampler"] and all(k != "sampler" for k, _, _ in diffs):
            diffs.append(("sampler", a.get("sampler"), b.get("sampler")))
        if diffs:
            raise UserError(f"--seeds {first} and {s} differ in more than the seed: "
                             f"{runs.describe_differences(diffs)}")
    seen: dict[Any, str | Path] = {}
    for s, b in zip(seeds, ids, strict=True):
        if b.get("seed") in seen:
            raise UserError(f"--seeds {seen[b.get('seed')]} and {s} are the same run (both of seed "
                             f"{b.get('seed')}): each seed once")
        seen[b.get("seed")] = s


def score_run(run_dir: str | Path, truth: Truth, space: Any = None, heldout: int | None = None) -> Scored:
    """The run's accuracy and loss for each of the truth's architectures. TruthError if it trained another space
    (by name or, where the run records it, by digest), if an architecture of the truth is not one of its space,
    or if its scores rank nothing (NaN or infinite: a diverged run; every architecture scored alike)."""
    from naspipe.models import heldout_batches
    from naspipe.search.run import _read_config, load_trained_run, make_evaluator

    t = truth.settings
    d = Path(run_dir)
    name = str(_read_config(d)["space"])
    if name != t.space:
        raise TruthError(f"{run_dir} trained space {name!r}; the truth is of space {t.space!r} "
                         f"({t.space_digest[:12]})")
    ident = _identity(d)
    recorded = ident.get("space_sha256")
    if recorded is not None and recorded != t.space_digest:
        raise TruthError(f"{run_dir} trained space {name!r} ({str(recorded)[:12]}); the truth is of another space of "
                         f"that name ({t.space_digest[:12]}): the same name, another definition")
    _check_behaviour(run_dir, ident, t)
    run = load_trained_run(run_dir, space)
    if run.space.digest() != t.space_digest:
        raise TruthError(f"{run_dir} trained space {run.space.name!r} ({run.space.digest()[:12]}); the truth is of "
                         f"space {t.space!r} ({t.space_digest[:12]})")
    check_archs(run.space, truth.archs, f"the truth {truth.folder}" if truth.folder else "the truth")
    evaluate = make_evaluator(run.model, heldout_batches(run.space, heldout))
    scores = [evaluate(a) for a in truth.archs]
    acc, loss = [float(x["accuracy"]) for x in scores], [float(x["loss"]) for x in scores]
    bad = sum(not (math.isfinite(a) and math.isfinite(x)) for a, x in zip(acc, loss, strict=True))
    if bad:
        raise TruthError(f"{run_dir}: the supernet's held-out accuracy or loss is NaN or infinite for {bad} of "
                         f"{len(acc)} architectures (a diverged run: see its losses.csv); it ranks nothing")
    if len(set(acc)) == 1:
        raise TruthError(f"{run_dir}: the supernet scores every architecture at the same accuracy ({acc[0]:.4f}); "
                         "it ranks nothing")
    return Scored(str(run_dir), acc, loss, run.config)


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
    """The truth's recorded space, for a run of a space of that name that cannot be resolved by its name alone (a
    space from a JSON file); None otherwise (the run's own space is used, and checked against the truth)."""
    from naspipe.search.run import RunError, _read_config, load_trained_run

    if truth_space is None:
        return None
    try:
        if str(_read_config(Path(run))["space"]) != truth.settings.space:
            return None
        load_trained_run(run)
    except RunError as e:
        if "unknown space" in str(e):
            return truth_space
    return None


def rank(run: str | Path, truth: str | Path | Truth, *, against: str | Path | None = None,
         seeds: Sequence[str | Path] = (), space: Any = None, heldout: int | None = None) -> RankReport:
    """Compare the supernet trained in ``run`` with ``truth`` (a folder or a loaded Truth); see the module.

    Refused before any model loads (ValueError, one line: ``TruthError`` for the truth): ``seeds`` that are one
    path rather than a list, or runs that differ in more than the seed; a ``heldout`` that is not a whole number
    >= 1; a truth of fewer than ``MIN_ARCHS`` architectures."""
    import time

    t0 = time.perf_counter()
    if isinstance(seeds, str | bytes | Path):
        raise UserError(f"seeds must be a list of run folders, not one path ({str(seeds)!r})")
    seeds = list(seeds)
    if heldout is not None:
        heldout = whole("heldout", heldout, 1)
    tr = truth if isinstance(truth, Truth) else load(truth)
    if len(tr.archs) < MIN_ARCHS:
        raise TooFewArchitectures(f"the truth {tr.folder or ''} holds {len(tr.archs)} architecture"
                                  f"{'s' if len(tr.archs) != 1 else ''}: too few to rank (at least {MIN_ARCHS})")
    if seeds:
        check_seed_runs(seeds)
    truth_space = space_of(tr)  # TruthError: a space.json swapped or corrupt
    if truth_space is not None:
        check_archs(truth_space, tr.archs, f"the truth {tr.folder}")
    if space is None:
        space = _run_space(run, tr, truth_space)
    target = [tr.mean_accuracy(a) for a in tr.archs]
    scored = score_run(run, tr, space, heldout)
    report = RankReport(tr, scored, agreement(target, scored.accuracy, scored.loss), seed_floor(tr))
    if seeds:
        same = os.path.realpath(run)
        report.seeds = [scored if os.path.realpath(s) == same else score_run(s, tr, space, heldout) for s in seeds]
        report.floor_runs = pairwise_tau([s.accuracy for s in report.seeds])
        report.seed_taus = [kendall(target, s.accuracy) for s in report.seeds]
    if against is not None:
        other = score_run(against, tr, space, heldout)
        report.against = other
        report.against_vs_truth = agreement(target, other.accuracy, other.loss)
        report.run_to_run = pairwise_tau([scored.accuracy, other.accuracy])
        report.tau_difference = difference(target, scored.accuracy, other.accuracy)
    report.wall_s = time.perf_counter() - t0
    return report
