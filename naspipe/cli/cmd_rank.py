"""``naspipe rank RUN --truth DIR``: how well a trained supernet ranks a ground truth's architectures.

Prints one screen: Kendall tau, Spearman rho, top-10% overlap and the regret of the search's pick, each with a
bootstrap 95% interval over architectures, beside the noise floors (``naspipe.ranking``); ``--against RUN2``
adds run-to-run agreement and says whether the difference clears the seed band; ``--json`` prints one object.
Refused in one line (exit 2), before any model loads where it can be: a truth of another space (by name, or by
the digest a run records; a run without ``run.json`` records none, and needs ``--space``), a ``--space`` that is not
the truth's (naming both), one with missing or malformed entries or a ``truth.json`` that disagrees with them,
one of too few architectures (``naspipe.ranking.stats.MIN_ARCHS``), ``--seeds`` runs that differ in more than the
seed (from each other or from RUN), an ``--against`` that is RUN itself or a copy of it; after scoring, a run that
ranks nothing (NaN scores: a diverged run; every architecture scored alike).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from naspipe.cli.common import os_refusal, positive_int
from naspipe.errors import UserError

COMMAND = "rank"
HELP = "rank correlation of a trained supernet with a stand-alone ground truth, with intervals and noise floors"
ORDER = 63


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN", help="a run directory with metrics.json and weights")
    p.add_argument("--truth", required=True, help="a truth folder written by naspipe truth")
    p.add_argument("--against", default=None, metavar="RUN2", help="a second run to compare with the first")
    p.add_argument("--seeds", nargs="+", default=(), metavar="RUN",
                   help="two or more runs equal but the supernet seed, each of another seed: noise floor (b) and "
                        "the seed band")
    p.add_argument("--space", default=None,
                   help="the runs' space when its name cannot be resolved (a run without run.json needs it); the "
                        "truth's space, checked by digest")
    p.add_argument("--heldout", type=positive_int("--heldout"), default=None,
                   help="held-out batches (default: as naspipe search)")
    p.add_argument("--resamples", type=positive_int("--resamples"), default=None,
                   help="bootstrap resamples of every interval (default 1000)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _check_run(d: str) -> None:
    from naspipe.runfolder import runs

    p = Path(d)
    with os_refusal(f"run directory {d[:80]!r}... cannot be read"):  # a name too long, a loop of links
        if not p.is_dir():
            raise UserError(f"no such run directory: {d!r}")
        if not (p / runs.METRICS).is_file():
            raise UserError(f"{d}: no metrics.json (is this a naspipe run directory?)")


def run(args: argparse.Namespace) -> int:
    for d in (args.run_dir, *([args.against] if args.against else []), *args.seeds):
        _check_run(d)
    from naspipe.truth.records import load

    with os_refusal(f"--truth {args.truth[:80]!r}... cannot be read"):
        load(args.truth)  # refused before any model loads
    from naspipe.ranking.compare import rank
    from naspipe.ranking.stats import RESAMPLES

    report = rank(args.run_dir, args.truth, against=args.against, seeds=args.seeds, space=args.space,
                  heldout=args.heldout, resamples=args.resamples or RESAMPLES)
    print(json.dumps(report.to_dict(), allow_nan=False) if args.json else report.text())
    return 0
