"""``naspipe search RUN_DIR``: find the best subnet of a trained supernet under a cost constraint.

Evaluates candidate subnets with the run's trained (inherited) weights on held-out data, ranks them by
accuracy (then loss), prints the chosen subnet, its scores and costs and a table of the best, and writes
``RUN_DIR/search.json`` (``--json`` prints the same object). Arguments are checked before torch loads.

``--ensemble RUN2 [RUN3 ...]`` scores each subnet with the mean accuracy and loss over RUN_DIR and those runs, equal
but the seed; ``--ensemble-last N`` (N >= 2) with the mean over RUN_DIR's last N supernets, its final weights and its
N - 1 newest complete checkpoints. Both are checked as ``naspipe rank`` checks them (``naspipe.ranking.ensemble``),
and refused together, before any model loads; the output names the supernets averaged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from naspipe.cli.common import add_ensemble_arguments, positive_int
from naspipe.errors import UserError
from naspipe.runfolder import runs

COMMAND = "search"
HELP = "search a trained supernet (random or evolution) under a params/latency constraint"
ORDER = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    from naspipe.search.strategies import STRATEGIES

    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with metrics.json and weights.pt")
    p.add_argument("--strategy", choices=STRATEGIES, default="evolution",
                   help="search strategy (default %(default)s)")
    p.add_argument("--budget", type=positive_int("--budget"), default=100,
                   help="distinct subnets to evaluate (default %(default)s)")
    p.add_argument("--constraint", action="append", default=None, metavar="METRIC<=VALUE",
                   help="params<=X (count; k, M suffixes) or latency<=Y (s, ms, us); repeat or join with commas")
    p.add_argument("--seed", type=int, default=0, help="search seed (default %(default)s)")
    p.add_argument("--top", type=positive_int("--top", 0), default=10, help="rows of the table (default %(default)s)")
    p.add_argument("--profile", default=None, help="JSON latency profile (block -> candidate -> time) "
                                                   "instead of the space's cost model")
    p.add_argument("--heldout", type=positive_int("--heldout"), default=None,
                   help="held-out batches to evaluate on (default: all for digits, 8 for transformers)")
    p.add_argument("--population", type=positive_int("--population", 2), default=None,
                   help="evolution: population size (default budget/4, at most 20)")
    p.add_argument("--sample-size", type=positive_int("--sample-size"), default=None,
                   help="evolution: tournament size (default population/4, at least 2)")
    p.add_argument("--sampler", default="uniform",
                   help="how random subnets are drawn (random search, evolution's first population): uniform, fair "
                        "(every candidate equally often) or spread[:fair|uniform] (default %(default)s)")
    p.add_argument("--space", default=None, help="the run's space (JSON file or module:function) when its name "
                                                   "cannot be resolved")
    add_ensemble_arguments(p, "subnet", "RUN_DIR")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _check_run_dir(run_dir: Path) -> None:
    """A folder search can read: its metrics.json and trained weights (RUN_DIR and each ``--ensemble`` run)."""
    if not run_dir.is_dir():
        raise UserError(f"no such run directory: {str(run_dir)!r}")
    if not (run_dir / runs.METRICS).is_file():
        raise UserError(f"{run_dir}: no metrics.json (is this a naspipe run directory?)")
    if not (run_dir / "weights.pt").is_file() and not any(run_dir.glob("weights-stage*.pt")):
        raise UserError(f"{run_dir}: no weights.pt (nor weights-stage*.pt); the run saved no trained weights")


def run(args: argparse.Namespace) -> int:
    from naspipe.cli.common import fixed_sampler_arg
    from naspipe.search.constraints import parse_constraints
    from naspipe.sequences.samplers import sampler_forms

    sampler = fixed_sampler_arg(args, f"needs training losses; search draws {sampler_forms(online=False)}")
    constraints = parse_constraints(args.constraint)
    run_dir = Path(args.run_dir)
    for d in (run_dir, *map(Path, args.ensemble)):
        _check_run_dir(d)
    if args.population is not None and args.sample_size is not None and args.sample_size > args.population:
        raise UserError(f"--sample-size {args.sample_size} exceeds --population {args.population}")

    from naspipe.ranking.ensemble import search_ensemble

    result = search_ensemble(run_dir, ensemble=args.ensemble, ensemble_last=args.ensemble_last or 0,
                             strategy=args.strategy, budget=args.budget, constraints=constraints,
                             seed=args.seed, profile=args.profile, heldout=args.heldout, space=args.space,
                             top=args.top, population=args.population, sample_size=args.sample_size,
                             sampler=str(sampler))
    if args.json:
        print(json.dumps(result.to_dict(args.top)))
    else:
        print(result.summary())
        if args.top:
            print(result.table(args.top))
        print(f"wrote {run_dir / 'search.json'}")
    return 0 if result.best is not None else 1
