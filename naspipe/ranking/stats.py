"""Rank statistics with bootstrap confidence intervals over architectures, and the seed noise floors.

Why it exists: one number (a Kendall tau) says nothing without its interval and without knowing how much a
change of seed alone moves it. Every statistic here is computed by scipy (``kendalltau`` (tau-b),
``spearmanr``) and its 95% interval by ``scipy.stats.bootstrap`` (percentile, seeded) resampling the
architectures with replacement. Torch-free: it takes plain sequences.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    from naspipe.truth.records import Truth

RESAMPLES = 1000
TOP_FRACTION = 0.1


@dataclass(frozen=True)
class Estimate:
    """A statistic, with the bounds of its 95% bootstrap interval."""

    value: float
    low: float
    high: float

    def text(self, digits: int = 2) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


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


def bootstrap(stat: Callable[[np.ndarray], float], n: int, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of ``stat(indices)`` over ``n`` architectures resampled with replacement."""
    if n < 2:
        v = stat(np.arange(n))
        return v, v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap((np.arange(n),), stat, vectorized=False, n_resamples=RESAMPLES,
                              method="percentile", random_state=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return lo, hi


def estimate(stat: Callable[[np.ndarray], float], n: int, seed: int = 0) -> Estimate:
    lo, hi = bootstrap(stat, n, seed)
    return Estimate(float(stat(np.arange(n))), lo, hi)


@dataclass(frozen=True)
class Agreement:
    """How well an estimate (a supernet's accuracies) ranks like a truth, each statistic with its interval."""

    kendall: Estimate
    spearman: Estimate
    top: Estimate
    regret: Estimate
    pick: int

    def to_dict(self) -> dict[str, object]:
        return {"kendall_tau": self.kendall.to_dict(), "spearman_rho": self.spearman.to_dict(),
                "top10_overlap": self.top.to_dict(), "regret": self.regret.to_dict(), "pick": self.pick}


def agreement(truth: Sequence[float], est: Sequence[float], est_loss: Sequence[float] | None = None,
              seed: int = 0) -> Agreement:
    """Kendall tau, Spearman rho, top-10% overlap and the regret of the pick, with bootstrap intervals."""
    t, e = np.asarray(truth, dtype=float), np.asarray(est, dtype=float)
    el = np.asarray(est_loss if est_loss is not None else np.zeros(len(e)), dtype=float)
    n = len(t)

    def sub(f: Callable[..., float]) -> Callable[[np.ndarray], float]:
        return lambda i: f(t[i].tolist(), e[i].tolist(), el[i].tolist())

    return Agreement(kendall=estimate(sub(lambda a, b, _: kendall(a, b)), n, seed),
                     spearman=estimate(sub(lambda a, b, _: spearman(a, b)), n, seed),
                     top=estimate(sub(lambda a, b, c: top_overlap(a, b, est_loss=c)), n, seed),
                     regret=estimate(sub(regret), n, seed), pick=pick(e.tolist(), el.tolist()))


def pairwise_tau(columns: Sequence[Sequence[float]], seed: int = 0) -> Estimate | None:
    """Mean Kendall tau over every pair of ``columns`` (seeds), with its interval; None for one column."""
    cols = [np.asarray(c, dtype=float) for c in columns]
    if len(cols) < 2:
        return None
    pairs = list(combinations(range(len(cols)), 2))

    def stat(i: np.ndarray) -> float:
        return float(np.mean([kendall(cols[a][i], cols[b][i]) for a, b in pairs]))

    return estimate(stat, len(cols[0]), seed)


def seed_floor(truth: Truth) -> Estimate | None:
    """Floor (a): the truth's own seed-to-seed Kendall tau of held-out accuracy (mean over seed pairs)."""
    s = len(truth.settings.seeds)
    return pairwise_tau([[truth.accuracy[a][k] for a in truth.archs] for k in range(s)])


def difference(truth: Sequence[float], est_a: Sequence[float], est_b: Sequence[float], seed: int = 0) -> Estimate:
    """tau(truth, a) - tau(truth, b) on the same architectures, with its paired bootstrap interval."""
    t, a, b = (np.asarray(v, dtype=float) for v in (truth, est_a, est_b))
    return estimate(lambda i: kendall(t[i], a[i]) - kendall(t[i], b[i]), len(t), seed)


def verdict(diff: Estimate, band: float) -> str:
    """"difference" when the interval clears the seed band ``[-band, band]``, else "within seed noise"."""
    return "difference" if diff.low > band or diff.high < -band else "within seed noise"
