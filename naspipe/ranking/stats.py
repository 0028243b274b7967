"""Rank statistics with bootstrap confidence intervals over architectures, and the seed noise floors.

Why it exists: one number (a Kendall tau) says nothing without its interval and without knowing how much a
change of seed alone moves it. Every statistic here is computed by scipy (``kendalltau`` (tau-b),
``spearmanr``) and its 95% interval by ``scipy.stats.bootstrap`` (percentile, seeded) resampling the
architectures with replacement. Torch-free: it takes plain sequences.

Below ``MIN_ARCHS`` architectures a rank statistic's interval says nothing (with 4, every resample of a perfect
and a reversed ranking gives the same difference: a zero-width interval), so the statistics refuse fewer with
``TooFewArchitectures``; they refuse NaN or infinite scores too (a diverged supernet), so no NaN is ever
reported.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from naspipe.errors import UserError
from naspipe.inputs.wholes import whole

if TYPE_CHECKING:
    from naspipe.truth.records import Truth

RESAMPLES = 1000  # the default bootstrap resamples of every interval (each function takes ``resamples``)
TOP_FRACTION = 0.1
MIN_ARCHS = 10  # the fewest architectures a statistic with an interval is computed on


class TooFewArchitectures(UserError):
    """Fewer architectures than ``MIN_ARCHS``: no rank statistic with a meaningful interval."""


def check_scores(columns: Sequence[Sequence[float]], *names: str) -> int:
    """The number of architectures of ``columns`` (one score per architecture each, ``names`` naming them):
    equally long, finite numbers, at least ``MIN_ARCHS`` of them; ValueError (``TooFewArchitectures``) otherwise."""
    cols = list(columns)
    label = [*names, *(f"column {i}" for i in range(len(names), len(cols)))]
    for name, c in zip(label, cols, strict=False):
        if isinstance(c, str | bytes) or not hasattr(c, "__len__"):  # (a list, an array, a Series)
            raise UserError(f"{name} must be a list of scores, one per architecture, got {type(c).__name__}")
    lengths = [len(c) for c in cols]
    if len(set(lengths)) > 1:
        shown = ", ".join(f"{name} {k}" for name, k in zip(label, lengths, strict=False))
        raise UserError(f"the columns differ in length ({shown}): one score per architecture in each")
    for name, c in zip(label, cols, strict=False):
        bad = [x for x in c if isinstance(x, bool) or not isinstance(x, int | float | np.number)
               or not math.isfinite(x)]
        if bad:
            raise UserError(f"{name} holds {len(bad)} score(s) that are not finite numbers (first {bad[0]!r})")
    n = lengths[0] if lengths else 0
    if n < MIN_ARCHS:
        raise TooFewArchitectures(f"too few architectures to rank: {n} (a statistic with an interval needs at "
                                  f"least {MIN_ARCHS})")
    return n


@dataclass(frozen=True)
class Estimate:
    """A statistic, with the bounds of its 95% bootstrap interval."""

    value: float
    low: float
    high: float

    def text(self, digits: int = 2) -> str:
        """``value [low, high]``; "n/a" for a bound that is not a number, and alone where none is (a rank
        statistic of a column that ties every architecture)."""
        def one(x: float) -> str:
            return f"{x:.{digits}f}" if math.isfinite(x) else "n/a"

        if not any(math.isfinite(x) for x in (self.value, self.low, self.high)):
            return "n/a"
        return f"{one(self.value)} [{one(self.low)}, {one(self.high)}]"

    def to_dict(self) -> dict[str, float | None]:
        """JSON-ready: a bound that is not a finite number is None (JSON has no NaN)."""
        return {k: (float(v) if math.isfinite(v) else None)
                for k, v in (("value", self.value), ("low", self.low), ("high", self.high))}


def kendall(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (0 where one side is constant)."""
    t = stats.kendalltau(x, y).statistic
    return 0.0 if t is None or math.isnan(t) else float(t)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (0 where one side is constant)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = stats.spearmanr(x, y).statistic
    return 0.0 if r is None or math.isnan(r) else float(r)


def _order(values: Sequence[float], tie: Sequence[float] | None = None) -> list[int]:
    """Indices best first: highest value, then lowest ``tie`` (a loss), then lowest index."""
    t = tie if tie is not None else [0.0] * len(values)
    return sorted(range(len(values)), key=lambda i: (-values[i], t[i], i))


def top_overlap(truth: Sequence[float], est: Sequence[float], fraction: float = TOP_FRACTION,
                est_loss: Sequence[float] | None = None) -> float:
    """The share of the truth's top ``fraction`` that the estimate also puts in its top ``fraction``."""
    k = max(1, math.ceil(fraction * len(truth)))
    return len(set(_order(truth)[:k]) & set(_order(est, est_loss)[:k])) / k


def pick(est: Sequence[float], est_loss: Sequence[float] | None = None) -> int:
    """What ``naspipe search`` picks: the highest estimated accuracy, then the lowest loss."""
    return _order(est, est_loss)[0]


def regret(truth: Sequence[float], est: Sequence[float], est_loss: Sequence[float] | None = None) -> float:
    """The truth's best accuracy minus the truth accuracy of the estimate's pick."""
    return max(truth) - truth[pick(est, est_loss)]


def bootstrap(stat: Callable[[np.ndarray], float], n: int, seed: int = 0,
              resamples: int = RESAMPLES) -> tuple[float, float]:
    """95% percentile interval of ``stat(indices)`` over ``n`` architectures resampled with replacement
    ``resamples`` times (a whole number >= 1: ValueError otherwise)."""
    resamples = whole("resamples", resamples, 1)
    if n < 2:
        v = stat(np.arange(n))
        return v, v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap((np.arange(n),), stat, vectorized=False, n_resamples=resamples,
                              method="percentile", random_state=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return lo, hi


def estimate(stat: Callable[[np.ndarray], float], n: int, seed: int = 0, resamples: int = RESAMPLES) -> Estimate:
    lo, hi = bootstrap(stat, n, seed, resamples)
    return Estimate(float(stat(np.arange(n))), lo, hi)


NOT_RANKED = Estimate(math.nan, math.nan, math.nan)  # a rank statistic where one side ties every architecture


def ties_all(column: Sequence[float]) -> bool:
    """Every architecture has the same score: the column ranks nothing (a rank correlation with it is undefined)."""
    return len(set(column)) <= 1


@dataclass(frozen=True)
class Agreement:
    """How well an estimate (a supernet's accuracies) ranks like a truth, each statistic with its interval."""

    kendall: Estimate
    spearman: Estimate
    top: Estimate
    regret: Estimate
    pick: int
    pick_ties: int = 0  # other architectures the estimate scores exactly as the pick (accuracy and loss)

    def to_dict(self) -> dict[str, object]:
        return {"kendall_tau": self.kendall.to_dict(), "spearman_rho": self.spearman.to_dict(),
                "top10_overlap": self.top.to_dict(), "regret": self.regret.to_dict(), "pick": self.pick,
                "pick_ties": self.pick_ties}


def agreement(truth: Sequence[float], est: Sequence[float], est_loss: Sequence[float] | None = None,
              seed: int = 0, resamples: int = RESAMPLES) -> Agreement:
    """Kendall tau, Spearman rho, top-10% overlap and the regret of the pick, with bootstrap intervals.
    ValueError for columns of different lengths, NaN or infinite scores, or fewer than ``MIN_ARCHS``."""
    cols = [truth, est] + ([est_loss] if est_loss is not None else [])
    n = check_scores(cols, "the truth", "the estimate", "the estimate's loss")
    t, e = np.asarray(truth, dtype=float), np.asarray(est, dtype=float)
    el = np.asarray(est_loss if est_loss is not None else np.zeros(len(e)), dtype=float)

    def sub(f: Callable[..., float]) -> Callable[[np.ndarray], float]:
        return lambda i: f(t[i].tolist(), e[i].tolist(), el[i].tolist())

    tied = ties_all(truth) or ties_all(est)  # (tau and rho: n/a, not the 0 of a constant side)
    return Agreement(kendall=NOT_RANKED if tied else estimate(sub(lambda a, b, _: kendall(a, b)), n, seed, resamples),
                     spearman=NOT_RANKED if tied else estimate(sub(lambda a, b, _: spearman(a, b)), n, seed,
                                                               resamples),
                     top=estimate(sub(lambda a, b, c: top_overlap(a, b, est_loss=c)), n, seed, resamples),
                     regret=estimate(sub(regret), n, seed, resamples), pick=(p := pick(e.tolist(), el.tolist())),
                     pick_ties=int(np.sum((e == e[p]) & (el == el[p]))) - 1)


def pairwise_tau(columns: Sequence[Sequence[float]], seed: int = 0, resamples: int = RESAMPLES) -> Estimate | None:
    """Mean Kendall tau over every pair of ``columns`` (seeds), with its interval; None for one column;
    ``NOT_RANKED`` (text "n/a") where a column ties every architecture."""
    if len(columns) < 2:
        return None
    check_scores(columns)
    if any(ties_all(c) for c in columns):
        return NOT_RANKED
    cols = [np.asarray(c, dtype=float) for c in columns]
    pairs = list(combinations(range(len(cols)), 2))

    def stat(i: np.ndarray) -> float:
        return float(np.mean([kendall(cols[a][i], cols[b][i]) for a, b in pairs]))

    return estimate(stat, len(cols[0]), seed, resamples)


def seed_floor(truth: Truth, resamples: int = RESAMPLES) -> Estimate | None:
    """Floor (a): the truth's own seed-to-seed Kendall tau of held-out accuracy (mean over seed pairs); None for a
    truth of one seed (``TooFewArchitectures`` for one of fewer than ``MIN_ARCHS`` architectures). ``truth``: a
    loaded ``Truth`` (``naspipe.truth.load``) or its folder."""
    if isinstance(truth, str | os.PathLike):
        from naspipe.truth.records import load

        truth = load(truth)
    if not all(hasattr(truth, k) for k in ("settings", "accuracy", "archs")):
        raise UserError(f"seed_floor takes a truth (naspipe.truth.load(folder), or the folder), got "
                        f"{type(truth).__name__}")
    s = len(truth.settings.seeds)
    return pairwise_tau([[truth.accuracy[a][k] for a in truth.archs] for k in range(s)], resamples=resamples)


def difference(truth: Sequence[float], est_a: Sequence[float], est_b: Sequence[float], seed: int = 0,
               resamples: int = RESAMPLES) -> Estimate:
    """tau(truth, a) - tau(truth, b) on the same architectures, with its paired bootstrap interval (ValueError
    as ``agreement``)."""
    check_scores([truth, est_a, est_b], "the truth", "estimate a", "estimate b")
    if any(ties_all(c) for c in (truth, est_a, est_b)):  # (a tau with a column that ranks nothing is n/a)
        return NOT_RANKED
    t, a, b = (np.asarray(v, dtype=float) for v in (truth, est_a, est_b))
    return estimate(lambda i: kendall(t[i], a[i]) - kendall(t[i], b[i]), len(t), seed, resamples)


def verdict(diff: Estimate, band: float) -> str:
    """"difference" when the interval clears the seed band ``[-band, band]``, else "within seed noise"; "n/a"
    where the difference or the band is not a number (a column that ties every architecture)."""
    if not all(math.isfinite(x) for x in (diff.low, diff.high, band)):
        return "n/a"
    return "difference" if diff.low > band or diff.high < -band else "within seed noise"
