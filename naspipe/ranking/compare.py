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

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from naspipe.ranking.stats import Agreement, Estimate, agreement, difference, kendall, pairwise_tau, seed_floor, verdict
from naspipe.truth.records import SPACE_JSON, Truth, TruthError, load


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

    def to_dict(self) -> dict[str, Any]:
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
                 f"{self.truth.mean_accuracy(pick):.4f})",
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
            lines += [f"against: {self.against.run}",
                      f"  its Kendall tau vs truth {b.kendall.text()}, regret {b.regret.text(4)}, {same}",
                      f"  run vs run Kendall tau   {self.run_to_run.text()}"
                      + (f" (seed floor {self.floor_runs.value:.2f})" if self.floor_runs else ""),
                      f"  tau difference           {self.tau_difference.text()}: {self.verdict()}"
                      + ("" if self.seeds else " (no seed band: pass --seeds)")]
        return "\n".join(lines)


def score_run(run_dir: str | Path, truth: Truth, space: Any = None, heldout: int | None = None) -> Scored:
    """The run's accuracy and loss for each of the truth's architectures (TruthError if it trained another
    space)."""
    from naspipe.models import heldout_batches
    from naspipe.search.run import _read_config, load_trained_run, make_evaluator

    t = truth.settings
    name = str(_read_config(Path(run_dir))["space"])
    if name != t.space:
        raise TruthError(f"{run_dir} trained space {name!r}; the truth is of space {t.space!r} "
                         f"({t.space_digest[:12]})")
    run = load_trained_run(run_dir, space)
    if run.space.digest() != t.space_digest:
        raise TruthError(f"{run_dir} trained space {run.space.name!r} ({run.space.digest()[:12]}); the truth is of "
                         f"space {t.space!r} ({t.space_digest[:12]})")
    evaluate = make_evaluator(run.model, heldout_batches(run.space, heldout))
    scores = [evaluate(a) for a in truth.archs]
    return Scored(str(run_dir), [s["accuracy"] for s in scores], [s["loss"] for s in scores], run.config)


def _recorded(run: str | Path, truth: Truth, space_file: Path) -> Any:
    """The truth's space file, for a run of a space of that name that cannot be resolved by its name alone (a
    space from a JSON file); None otherwise (the run's own space is used, and checked against the truth)."""
    from naspipe.search.run import RunError, _read_config, load_trained_run

    try:
        if str(_read_config(Path(run))["space"]) != truth.settings.space:
            return None
        load_trained_run(run)
    except RunError as e:
        if "unknown space" in str(e):
            return str(space_file)
    return None


def rank(run: str | Path, truth: str | Path | Truth, *, against: str | Path | None = None,
         seeds: Sequence[str | Path] = (), space: Any = None, heldout: int | None = None) -> RankReport:
    """Compare the supernet trained in ``run`` with ``truth`` (a folder or a loaded Truth); see the module."""
    import time

    t0 = time.perf_counter()
    tr = truth if isinstance(truth, Truth) else load(truth)
    if space is None and not isinstance(truth, Truth) and (Path(truth) / SPACE_JSON).is_file():
        space = _recorded(run, tr, Path(truth) / SPACE_JSON)
    target = [tr.mean_accuracy(a) for a in tr.archs]
    scored = score_run(run, tr, space, heldout)
    report = RankReport(tr, scored, agreement(target, scored.accuracy, scored.loss), seed_floor(tr))
    if seeds:
        report.seeds = [scored if Path(s) == Path(run) else score_run(s, tr, space, heldout) for s in seeds]
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
