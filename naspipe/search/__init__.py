"""Architecture search on a trained supernet: evaluate subnets with inherited weights, rank, evolve.

Torch-free parts load eagerly (constraints, cost model, strategies, results); the torch side
(``search_run``, ``search_model``, ``load_trained_run``, ``read_config``, ``cost_model``, ``measure_profile``) and the
plotly figure (``accuracy_vs_cost``) load on first use, so the command line can validate its arguments without
importing torch.

    from naspipe.search import parse_constraints, search_run
    result = search_run("runs/digits", strategy="evolution", budget=100,
                        constraints=parse_constraints("params<=40k"), seed=0)
    print(result.summary()); print(result.table(10))

An ensemble (``naspipe search RUN --ensemble RUN2 ...`` or ``--ensemble-last N``) scores each subnet with the mean
over several supernets: ``naspipe.ranking.ensemble.search_ensemble(run, ensemble=[...])`` or ``(run,
ensemble_last=N)`` checks them as ``naspipe.rank`` does and calls ``search_run(members=[Member, ...])``.
"""

from __future__ import annotations

from typing import Any

from naspipe.search.constraints import Constraint, ConstraintError, format_cost, parse_constraints
from naspipe.search.result import Evaluated, SearchResult, subnet_names
from naspipe.search.strategies import STRATEGIES, InfeasibleError, search_space
from naspipe.search.subnet_costs import ProfileError, SearchCosts

_LAZY = {"search_run": "run", "search_model": "run", "load_trained_run": "run", "cost_model": "run", "RunError": "run",
         "read_config": "run", "make_evaluator": "run", "mean_evaluator": "run", "Member": "run", "SEARCH_JSON": "run",
         "measure_profile": "naspipe.preflight.measure", "accuracy_vs_cost": "plot"}

__all__ = ["Constraint", "ConstraintError", "SearchCosts", "Evaluated", "InfeasibleError", "ProfileError",
           "STRATEGIES", "SearchResult", "format_cost", "parse_constraints", "search_space", "subnet_names",
           *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        where = _LAZY[name]
        return getattr(importlib.import_module(where if "." in where else f"naspipe.search.{where}"), name)
    raise AttributeError(f"module 'naspipe.search' has no attribute {name!r}")
