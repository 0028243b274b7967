"""Search strategies over a search space: random sampling and regularized (aging) evolution.

Pure Python and torch-free: a strategy gets an ``evaluate(subnet) -> {"accuracy", "loss"}`` callable and a
``SearchCosts``, proposes only subnets that satisfy the constraints (sample, then reject or repair), never
evaluates a subnet twice, and draws every random number from one ``random.Random`` seeded by
``(strategy, seed)``, so the same inputs give the same sequence of evaluations, hence the same result.

Regularized evolution (Real et al., AAAI 2019): a population of the ``population`` most recently evaluated
subnets; each step draws ``sample_size`` members, takes the best as parent (optionally crosses it with a
second tournament winner, uniform per block), mutates one choice block, and the oldest member dies.

``sampler`` (``naspipe.sequences.samplers``) says how random subnets are drawn (random search, evolution's first
population, and the fallback when a proposal fails): ``uniform`` from the seeded ``random.Random`` above,
``fair`` or ``spread[:BASE]`` in the order of that stream keyed by the search seed (every candidate proposed
equally often, as the supernet was trained with ``--sampler fair``).
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from naspipe.errors import UserError
from naspipe.inputs.wholes import whole
from naspipe.search.constraints import Constraint, parse_constraints
from naspipe.search.result import Evaluated, SearchResult
from naspipe.search.subnet_costs import SearchCosts
from naspipe.sequences.samplers import fixed_sampler, make_stream, sampler_forms
from naspipe.spaces.space import SearchSpace, Subnet

EvaluateFn = Callable[[Subnet], Mapping[str, float]]
STRATEGIES: tuple[str, ...] = ("random", "evolution")
_TRIES = 200


class Explorer:
    """Seeded subnet proposals that respect the constraints: random, mutate, crossover, repair."""

    def __init__(self, space: SearchSpace, costs: SearchCosts, constraints: Sequence[Constraint], rng: random.Random,
                 sampler: str = "uniform", seed: int = 0):
        self.space, self.costs, self.constraints, self.rng = space, costs, tuple(constraints), rng
        self.choice = space.choice_blocks
        self._stream = None if sampler == "uniform" else make_stream(space, seed, 1 << 62, sampler)
        self._drawn = 0

    def feasible(self, s: Sequence[int]) -> bool:
        return self.costs.feasible(s, self.constraints)

    def random(self) -> Subnet:
        if self._stream is not None:  # the next subnet of the seeded fair / spread stream
            self._drawn += 1
            return self._stream[self._drawn - 1]
        return tuple(self.rng.randrange(b.k) if not b.fixed else 0 for b in self.space.blocks)

    def mutate(self, s: Sequence[int]) -> Subnet:
        """Change one choice block to another of its candidates (blocks with one candidate are skipped)."""
        blocks = [b for b in self.choice if self.space.blocks[b].k > 1]
        if not blocks:
            return tuple(s)
        b = self.rng.choice(blocks)
        out = list(s)
        out[b] = self.rng.choice([k for k in range(self.space.blocks[b].k) if k != s[b]])
        return tuple(out)

    def crossover(self, a: Sequence[int], b: Sequence[int]) -> Subnet:
        return tuple(x if self.rng.random() < 0.5 else y for x, y in zip(a, b, strict=True))

    def repair(self, s: Sequence[int]) -> Subnet | None:
        """Swap candidates for cheaper ones on a violated metric until feasible; None if stuck."""
        out = list(s)
        for _ in range(4 * len(self.choice) + 4):
            violated = [c for c in self.constraints if self.costs.cost(out, c.metric) > c.limit]
            if not violated:
                return tuple(out)
            table = self.costs.table(self.rng.choice(violated).metric)
            options = [(b, k) for b in self.choice for k in range(self.space.blocks[b].k)
                       if table[b][k] < table[b][out[b]]]
            if not options:
                return None
            b, k = self.rng.choice(options)
            out[b] = k
        return tuple(out) if self.feasible(out) else None

    def propose(self, make: Callable[[], Subnet], seen: set[Subnet]) -> Subnet | None:
        """A new feasible subnet from ``make`` (repaired when needed), else from random sampling; None when
        neither finds one in a bounded number of tries."""
        for gen in (make, self.random):
            for _ in range(_TRIES):
                s = gen()
                if not self.feasible(s):
                    s = self.repair(s)
                if s is not None and s not in seen:
                    return s
        return None


def _run(space: SearchSpace, costs: SearchCosts, constraints: Sequence[Constraint], evaluate: EvaluateFn,
         budget: int, choose: Callable[[Explorer, list[Evaluated]], Callable[[], Subnet]], rng: random.Random,
         sampler: str = "uniform", seed: int = 0) -> tuple[list[Evaluated], bool]:
    ex = Explorer(space, costs, constraints, rng, sampler, seed)
    history: list[Evaluated] = []
    seen: set[Subnet] = set()
    while len(history) < budget:
        s = ex.propose(choose(ex, history), seen)
        if s is None:
            return history, True
        seen.add(s)
        score = evaluate(s)
        c = costs.costs(s)
        history.append(Evaluated(len(history), s, float(score["accuracy"]), float(score["loss"]),
                                 c["params"], c["latency"]))
    return history, False


def search_space(space: SearchSpace, costs: SearchCosts, evaluate: EvaluateFn, *, strategy: str = "evolution",
                 budget: int = 100, constraints: Sequence[Constraint] | Sequence[str] | str = (), seed: int = 0,
                 population: int | None = None, sample_size: int | None = None,
                 crossover: float = 0.25, sampler: str = "uniform") -> SearchResult:
    """Run ``strategy`` for ``budget`` distinct evaluations; see the module docstring (``sampler`` too:
    uniform, fair or spread[:BASE]; ValueError for another). ``constraints``: ``Constraint`` s or their texts
    (``"params<=1M"``, as ``naspipe search --constraint`` takes them)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    budget, seed = whole("budget", budget), whole("seed", seed, None)  # (NaN ran nothing and said nothing)
    if population is not None:
        whole("population", population, 2)
    if sample_size is not None:
        whole("sample_size", sample_size)
    if isinstance(constraints, str):  # texts, as the command takes them ("params<=1M"), or Constraints
        constraints = parse_constraints(constraints)
    else:
        given = tuple(constraints)
        texts = [c for c in given if isinstance(c, str)]
        constraints = tuple(c for c in given if not isinstance(c, str)) + parse_constraints(texts)
    if not 0.0 <= crossover <= 1.0:
        raise ValueError(f"crossover probability must lie in [0, 1], got {crossover}")
    # a SamplerError is a ValueError
    sampler = str(fixed_sampler(sampler, f"needs training losses; a search draws {sampler_forms(online=False)}"))
    check_feasible(costs, constraints)
    rng = random.Random(f"naspipe-search:{strategy}:{int(seed)}")
    settings: dict[str, object] = {"params_source": costs.params_source, "latency_source": costs.latency_source,
                                   "sampler": sampler}
    t0 = time.perf_counter()
    if strategy == "random":
        history, exhausted = _run(space, costs, constraints, evaluate, budget, lambda ex, h: ex.random, rng,
                                  sampler, seed)
    else:
        pop_n = population or min(20, max(2, budget // 4))
        sample_n = min(pop_n, sample_size or max(2, pop_n // 4))
        if pop_n < 1 or sample_n < 1:
            raise ValueError("population and sample size must be >= 1")
        settings.update({"population": pop_n, "sample_size": sample_n, "crossover": crossover})
        population_q: deque[Evaluated] = deque()

        def tournament(ex: Explorer) -> Subnet:
            members = ex.rng.sample(list(population_q), min(sample_n, len(population_q)))
            return min(members, key=Evaluated.rank_key).subnet

        def choose(ex: Explorer, history: list[Evaluated]) -> Callable[[], Subnet]:
            # the population is the last pop_n evaluations (aging: the oldest dies, not the worst)
            population_q.clear()
            population_q.extend(history[-pop_n:])
            if len(history) < pop_n:
                return ex.random

            def child() -> Subnet:
                parent = tournament(ex)
                if crossover and ex.rng.random() < crossover:
                    parent = ex.crossover(parent, tournament(ex))
                return ex.mutate(parent)
            return child

        history, exhausted = _run(space, costs, constraints, evaluate, budget, choose, rng, sampler, seed)
    return SearchResult(space, strategy, int(seed), budget, tuple(constraints), history, settings, exhausted,
                        time.perf_counter() - t0)


class InfeasibleError(UserError):
    """No subnet of the space can satisfy a constraint."""


def check_feasible(costs: SearchCosts, constraints: Sequence[Constraint]) -> None:
    """Raise InfeasibleError when even the cheapest subnet breaks a constraint (checked per metric)."""
    from naspipe.search.constraints import format_cost

    for c in constraints:
        low, _ = costs.extreme(c.metric)
        if low > c.limit:
            raise InfeasibleError(f"constraint {c} cannot be met: the cheapest subnet of {costs.space.name} "
                                  f"has {c.metric} {format_cost(c.metric, low)}")
