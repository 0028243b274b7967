"""Run-time generated subnet sequences: exploration algorithms fed with the training losses.

NASPipe's point is that the exploration algorithm produces the subnet sequence while the supernet trains.
``EvolutionSampler`` is such an algorithm, an ``OnlineSampler`` (see ``naspipe.sequences.sequence``) for
``OnlineStream``: subnet ``j`` depends only on the training losses of subnets ``<= j - lag``, which every
run knows by the time it needs subnet ``j`` whatever the timing, so runs stay reproducible (bit-identical
sequences, hence bit-identical training) as long as the losses are.

Design (pure Python, no torch, no clock, no global random state):

* warm-up (``j < warmup``): subnet ``j`` is exactly ``UniformStream(space, seed)[j]``;
* afterwards, with probability ``explore`` a uniform subnet (every candidate keeps being trained);
  otherwise a tournament: ``tournament`` indices drawn from the window of the ``population`` most recent
  visible subnets ``[j - lag - population + 1, j - lag]``, the lowest loss wins (ties: the older index;
  a NaN loss never wins), and the child is the winner with one choice block mutated (plus each other
  choice block with probability ``1 / choice blocks``);
* every random number comes from ``random.Random`` seeded with ``(seed, j)``, so ``propose`` is a pure
  function of ``j`` and the losses it may read. The sampler remembers the subnets it proposed (it needs
  the parents); a fresh sampler recomputes them from the same losses, so it can start at any ``j``.

The sampler reads ``results[i]`` only for ``i`` in the window above (never iterates over ``results``), so
losses reported early by a fast pipeline cannot leak into a decision. Losses are append-only: a reported
loss never changes.

For a pipeline: ``lag`` must not depend on the stage count (or runs on different stage counts would train
different sequences); with a lag below the number of subnets in flight the pipeline waits for losses.

Samplers fixed by the seed alone (``make_stream``): ``uniform`` (``naspipe.sequences.sequence.UniformStream``),
``fair`` (strict fairness) and ``spread[:fair|uniform]`` (conflict spreading over that base, fair by
default), both in ``naspipe.sequences.fair``, whose docstring states their frequency bounds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from naspipe.errors import UserError
from naspipe.sequences.fair import FairStream, SpreadStream
from naspipe.sequences.sequence import OnlineStream, SubnetStream, UniformStream
from naspipe.spaces.space import SearchSpace, Subnet

SAMPLERS: tuple[str, ...] = ("uniform", "fair", "spread", "evolution")
SPREAD_BASES: tuple[str, ...] = ("fair", "uniform")
CHOICES = "uniform, fair, spread[:fair|uniform] or evolution[:LAG]"
DEFAULT_LAG = 16


class SamplerError(UserError):
    """A sampler description is malformed (one line saying what is allowed)."""


class EvolutionSampler:
    """Tournament evolution over recent training losses; an ``OnlineSampler``. See the module docstring."""

    def __init__(self, space: SearchSpace, seed: int = 0, lag: int = DEFAULT_LAG, population: int = 32,
                 tournament: int = 8, warmup: int | None = None, explore: float = 0.1):
        if lag < 1:
            raise SamplerError(f"lag must be >= 1 (subnet j may read results of subnets <= j - lag), got {lag}")
        if population < 1 or not 1 <= tournament <= population:
            raise SamplerError(f"need population >= 1 and 1 <= tournament <= population, got {population}, "
                               f"{tournament}")
        if not 0.0 <= explore <= 1.0:
            raise SamplerError(f"explore must lie in [0, 1], got {explore}")
        self.space, self.seed, self.lag = space, int(seed), int(lag)
        self.population, self.tournament, self.explore = int(population), int(tournament), float(explore)
        self.warmup = self.lag + self.population if warmup is None else int(warmup)
        if self.warmup < 0:
            raise SamplerError(f"warmup must be >= 0, got {warmup}")
        self._uniform = UniformStream(space, self.seed, 1 << 62)
        self._choice = [b for b in space.choice_blocks if space.blocks[b].k > 1]
        self._made: list[Subnet] = []

    def __str__(self) -> str:
        return f"evolution:{self.lag}"

    def describe(self) -> dict[str, object]:
        return {"sampler": "evolution", "seed": self.seed, "lag": self.lag, "population": self.population,
                "tournament": self.tournament, "warmup": self.warmup, "explore": self.explore}

    def propose(self, j: int, results: Mapping[int, float]) -> Subnet:
        """Subnet ``j``; reads ``results[i]`` for ``i <= j - lag`` only (a missing one raises KeyError naming it)."""
        if j < 0:
            raise IndexError(j)
        while len(self._made) <= j:  # parents first; each reads only results older than itself
            i = len(self._made)
            self._made.append(self._propose(i, results))
        return self._made[j]

    def _propose(self, j: int, results: Mapping[int, float]) -> Subnet:
        newest = j - self.lag
        if j < self.warmup or newest + 1 < self.tournament:
            return self._uniform[j]
        rng = random.Random(f"naspipe-evolution:{self.seed}:{j}")
        if rng.random() < self.explore:
            return self._uniform[j]
        lo = max(0, newest - self.population + 1)
        picks = sorted(rng.sample(range(lo, newest + 1), self.tournament))
        parent = min(picks, key=lambda i: (_loss(results, i, j), i))
        return self._mutate(self._made[parent], rng)

    def _mutate(self, parent: Subnet, rng: random.Random) -> Subnet:
        if not self._choice:
            return parent
        child = list(parent)
        first = rng.choice(self._choice)
        for b in self._choice:
            if b == first or rng.random() < 1.0 / len(self._choice):
                k = self.space.blocks[b].k
                child[b] = rng.choice([c for c in range(k) if c != parent[b]])
        return tuple(child)


def _loss(results: Mapping[int, float], i: int, j: int) -> float:
    try:
        v = float(results[i])
    except KeyError:
        raise KeyError(f"subnet {j} needs the loss of subnet {i}, which was not reported") from None
    return math.inf if math.isnan(v) else v


@dataclass(frozen=True)
class SamplerSpec:
    """A parsed ``--sampler`` value: ``uniform``, ``fair``, ``spread[:BASE]`` or ``evolution[:LAG]``."""

    kind: str = "uniform"
    lag: int = DEFAULT_LAG
    base: str = "fair"  # spread's base distribution

    @property
    def online(self) -> bool:
        """The sequence is generated at run time from the losses (not a function of the seed alone)."""
        return self.kind == "evolution"

    def __str__(self) -> str:
        if self.kind in ("uniform", "fair"):
            return self.kind
        if self.kind == "spread":
            return f"spread:{self.base}"
        return f"{self.kind}:{self.lag}"


def parse_sampler(text: str) -> SamplerSpec:
    """``uniform``, ``fair``, ``spread[:fair|uniform]`` (default base fair) or ``evolution[:LAG]`` (LAG a
    whole number >= 1, default 16); SamplerError otherwise."""
    kind, sep, lag_text = str(text).strip().lower().partition(":")
    if kind not in SAMPLERS:
        raise SamplerError(f"unknown sampler {text!r}; choose {CHOICES}")
    if kind in ("uniform", "fair"):
        if sep:
            raise SamplerError(f"sampler {kind!r} takes no argument, got {text!r}")
        return SamplerSpec(kind)
    if kind == "spread":
        base = lag_text.strip() if sep else "fair"
        if base not in SPREAD_BASES:
            raise SamplerError(f"bad sampler {text!r}: spread's base is fair or uniform (spread:fair, spread:uniform)")
        return SamplerSpec("spread", base=base)
    if not sep:
        return SamplerSpec(kind, DEFAULT_LAG)
    if not lag_text.strip().isdigit() or int(lag_text) < 1:
        raise SamplerError(f"bad sampler {text!r}: use evolution:LAG with a whole number LAG >= 1")
    return SamplerSpec(kind, int(lag_text))


def make_stream(space: SearchSpace, seed: int, n: int, spec: SamplerSpec | str = "uniform") -> SubnetStream:
    """The subnet stream of a run: ``UniformStream``, ``FairStream``, ``SpreadStream`` or an ``OnlineStream``
    over an ``EvolutionSampler``.

    An online stream must be told each loss (``stream.report(j, loss)``) right after subnet ``j`` trains.
    """
    spec = parse_sampler(spec) if isinstance(spec, str) else spec
    if spec.kind == "uniform":
        return UniformStream(space, seed, n)
    if spec.kind == "fair":
        return FairStream(space, seed, n)
    if spec.kind == "spread":
        return SpreadStream(space, seed, n, spec.base)
    return OnlineStream(space, EvolutionSampler(space, seed, lag=spec.lag), n)
