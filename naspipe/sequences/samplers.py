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

Every sampler is declared once, as a ``Sampler`` given to ``register_sampler`` (as policies are in
``naspipe.sched.registry``): its name, the factory of its stream, whether it is online, the parser of its argument
and the words of ``--sampler``'s help. ``parse_sampler``, ``make_stream``, the commands and ``fixed_sampler`` (the
refusal of an online sampler where the sequence must be fixed up front) read the registry. The built-ins, at the
end of this module: ``uniform`` (``naspipe.sequences.sequence.UniformStream``), ``fair`` (strict fairness) and
``spread[:fair|uniform]`` (conflict spreading over that base, fair by default), both in ``naspipe.sequences.fair``,
whose docstring states their frequency bounds, are fixed by the seed alone; ``evolution[:LAG]`` is online.
"""

from __future__ import annotations

import importlib
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from naspipe.errors import UserError
from naspipe.lifecycle import user_modules
from naspipe.sequences.fair import SPREAD_BASES, FairStream, SpreadStream
from naspipe.sequences.sequence import OnlineStream, SubnetStream, UniformStream
from naspipe.spaces.space import SearchSpace, Subnet

DEFAULT_LAG = 16
# The sampler of a new run that names none: ``fair`` ranks within seed noise of ``uniform`` or better on both shipped
# truths at their powered lengths and trains faster (benchmarks/results/trust_curve*.json, samplers.json; README).
# A run that replays a given sequence trains it as given ("uniform", the sampler that marks a replay); a run resumed
# from a checkpoint keeps the sampler it was trained with; records that name none were trained ``uniform``.
DEFAULT_SAMPLER = "fair"
RECORDED_BEFORE = "uniform"  # the sampler of a run record or checkpoint that names none (older runs)


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
class Sampler:
    """A sampler, declared once: ``register_sampler(Sampler(...))`` is all it takes for ``--sampler NAME`` (its
    help and its refusals), ``RunSpec``, ``TrainConfig``, ``make_stream``, a plan, the simulator and a search.

    * ``name``: what ``--sampler`` names (lower case, no ``:``);
    * ``make(space, seed, n, arg)``: the stream of ``n`` subnets; ``arg`` is ``parse``'s value (None for a sampler
      without argument). A seeded sampler's subnet ``j`` is a pure function of the space, seed, ``arg`` and ``j``
      (a run resumes and replays it); an online sampler's stream is an ``OnlineStream``;
    * ``online``: the sequence is generated at run time from the training losses (a plan, the simulator and a
      search need it fixed up front and refuse it);
    * ``parse(text)``: the text after the colon (None when there is none) to ``arg``, whose ``str`` is written back
      in the canonical name (``spread`` is ``spread:fair``); raises SamplerError saying what is allowed. None: the
      sampler takes no argument;
    * ``metavar``: the argument's name in messages (``spread[:BASE]``); ``syntax``: the form the choices list
      (default ``NAME[:METAVAR]``); ``help``: what follows the syntax in ``--sampler``'s help.
    """

    name: str
    make: Callable[[SearchSpace, int, int, Any], SubnetStream]
    online: bool = False
    parse: Callable[[str | None], Any] | None = None
    metavar: str = ""
    syntax: str = ""
    help: str = ""

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or self.name != self.name.strip().lower():
            raise SamplerError(f"bad sampler name {self.name!r}: lower case, no ':'")

    def form(self, full: bool = False) -> str:
        """``spread[:BASE]``; ``full``: with the argument's values where declared (``spread[:fair|uniform]``)."""
        if full and self.syntax:
            return self.syntax
        return f"{self.name}[:{self.metavar}]" if self.metavar else self.name


_REGISTRY: dict[str, Sampler] = {}
ENV = "NASPIPE_SAMPLER_MODULES"  # modules that registered samplers, imported by a process that misses a name
_IMPORTED: set[str] = set()


def register_sampler(sampler: Sampler, *, replace: bool = False) -> Sampler:
    """Add ``sampler`` to the registry (``replace=True`` to redefine a name; the same object again is a no-op).
    A sampler registered from a user's module is recorded in ``NASPIPE_SAMPLER_MODULES``, which the processes a run
    starts inherit and import on a miss (as ``naspipe.register_policy``). Returns it."""
    if not isinstance(sampler, Sampler):
        raise SamplerError(f"register_sampler takes a naspipe Sampler, not {type(sampler).__name__}")
    old = _REGISTRY.get(sampler.name)
    if old is not None and old != sampler and not replace:
        raise SamplerError(f"sampler {sampler.name!r} is already registered; pass replace=True to redefine it")
    _REGISTRY[sampler.name] = sampler
    user_modules.record(ENV, getattr(sampler.make, "__module__", None) or "")
    return sampler


def unregister_sampler(name: str) -> Sampler:
    """Remove a registered sampler (tests, notebooks); SamplerError if it is not registered."""
    try:
        return _REGISTRY.pop(name)
    except KeyError:
        raise SamplerError(f"unknown sampler {name!r}") from None


def get_sampler(name: str) -> Sampler | None:
    """The registered ``Sampler`` of ``name`` (importing the recorded user modules on a miss), or None."""
    if name not in _REGISTRY:
        for module in user_modules.recorded(ENV):
            if module not in _IMPORTED:
                _IMPORTED.add(module)
                importlib.import_module(module)
    return _REGISTRY.get(name)


def default_sampler(sequence_given: bool = False) -> str:
    """The sampler a run uses when it names none: ``DEFAULT_SAMPLER``, or ``uniform`` when it replays a given
    sequence (which no sampler makes)."""
    return "uniform" if sequence_given else DEFAULT_SAMPLER


def sampler_names() -> list[str]:
    """Registered sampler names, in registration order (the built-ins first)."""
    return list(_REGISTRY)


def sampler_forms(*, online: bool | None = None, full: bool = False, last: str = " or ") -> str:
    """The registered samplers for a message, in registration order: ``uniform, fair or spread[:BASE]``.
    ``online``: only those generated at run time (True) or fixed by the seed (False); ``full``: the arguments'
    values where declared (``spread[:fair|uniform]``); ``last``: what precedes the last one."""
    forms = [s.form(full) for s in _REGISTRY.values() if online is None or s.online == online]
    return last.join([", ".join(forms[:-1]), forms[-1]]) if len(forms) > 1 else "".join(forms)


def sampler_help(online: bool = True) -> str:
    """``--sampler``'s help: every sampler fixed by the seed, then (``online``) those generated at run time."""
    def listed(group: list[Sampler]) -> str:
        return ", ".join(s.form(True) + s.help for s in group)

    text = "subnet sequence: " + listed([s for s in _REGISTRY.values() if not s.online])
    run_time = [s for s in _REGISTRY.values() if s.online]
    return text + " or " + listed(run_time) if online and run_time else text


@dataclass(frozen=True)
class SamplerSpec:
    """A parsed ``--sampler`` value: a registered sampler's name and its parsed argument (None without one)."""

    kind: str = "uniform"
    arg: Any = None

    @property
    def sampler(self) -> Sampler:
        found = get_sampler(self.kind)
        if found is None:
            raise SamplerError(f"unknown sampler {self.kind!r}; choose {sampler_forms(full=True)}")
        return found

    @property
    def online(self) -> bool:
        """The sequence is generated at run time from the losses (not a function of the seed alone)."""
        return self.sampler.online

    def __str__(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}:{self.arg}"


def parse_sampler(text: str) -> SamplerSpec:
    """``NAME[:ARG]`` of a registered sampler (the built-ins: ``uniform``, ``fair``, ``spread[:fair|uniform]``,
    default base fair, and ``evolution[:LAG]``, LAG a whole number >= 1, default 16); SamplerError otherwise."""
    kind, sep, arg = str(text).strip().lower().partition(":")
    sampler = get_sampler(kind)
    if sampler is None:
        raise SamplerError(f"unknown sampler {text!r}; choose {sampler_forms(full=True)}")
    if sampler.parse is None:
        if sep:
            raise SamplerError(f"sampler {kind!r} takes no argument, got {text!r}")
        return SamplerSpec(kind)
    try:
        return SamplerSpec(kind, sampler.parse(arg if sep else None))
    except SamplerError as e:
        raise SamplerError(f"bad sampler {text!r}: {e}") from None


def fixed_sampler(text: str, needs: str, named: str | None = None) -> SamplerSpec:
    """``text`` parsed for a reader that needs the sequence fixed before the run (a plan, the simulator, a search);
    SamplerError ``"NAMED NEEDS"`` for a sampler that generates it at run time (``named``: default ``sampler``
    and its canonical name)."""
    spec = parse_sampler(text)
    if spec.online:
        raise SamplerError(f"{named or f'sampler {spec}'} {needs}")
    return spec


def make_stream(space: SearchSpace, seed: int, n: int, spec: SamplerSpec | str = "uniform") -> SubnetStream:
    """The subnet stream of a run, made by the registered sampler ``spec`` names (the built-ins:
    ``UniformStream``, ``FairStream``, ``SpreadStream`` or an ``OnlineStream`` over an ``EvolutionSampler``).

    An online stream must be told each loss (``stream.report(j, loss)``) right after subnet ``j`` trains.
    """
    spec = parse_sampler(spec) if isinstance(spec, str) else spec
    return spec.sampler.make(space, seed, n, spec.arg)


def _spread_base(arg: str | None) -> str:
    base = "fair" if arg is None else arg.strip()
    if base not in SPREAD_BASES:
        raise SamplerError("spread's base is fair or uniform (spread:fair, spread:uniform)")
    return base


def _lag(arg: str | None) -> int:
    if arg is None:
        return DEFAULT_LAG
    if not arg.strip().isdigit() or int(arg) < 1:
        raise SamplerError("use evolution:LAG with a whole number LAG >= 1")
    return int(arg)


register_sampler(Sampler("uniform", lambda space, seed, n, _: UniformStream(space, seed, n), help=" (seeded)"))
register_sampler(Sampler("fair", lambda space, seed, n, _: FairStream(space, seed, n),
                         help=" (strict fairness: every candidate once per group of K subnets)"))
register_sampler(Sampler("spread", SpreadStream, parse=_spread_base, metavar="BASE", syntax="spread[:fair|uniform]",
                         help=" (the base's candidate frequencies, reuses kept apart)"))
register_sampler(Sampler("evolution", lambda space, seed, n, lag: OnlineStream(space, EvolutionSampler(
    space, seed, lag=lag), n), online=True, parse=_lag, metavar="LAG",
    help=", generated at run time from the losses of subnets <= j - LAG (default LAG 16)"))
