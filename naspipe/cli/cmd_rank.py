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

``--proxy synflow|gradnorm|params`` (no RUN) scores the truth's architectures at initialisation instead of with a
trained supernet (``naspipe.ranking.proxies``): the row for "no training at all", with the same statistics and floor
(a).
``--ensemble RUN2 [RUN3 ...]`` scores each architecture with the mean accuracy and loss of RUN and those runs, equal
but the seed (``naspipe.ranking.ensemble``). ``--ensemble-last N`` (N >= 2) scores it with the mean over RUN's last N
supernets: its final weights and its N - 1 newest complete checkpoints (``naspipe train --checkpoint-every E
--keep-checkpoints K`` keeps K); refused with ``--ensemble``, and when RUN keeps fewer checkpoints.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from naspipe.cli.common import add_ensemble_arguments, os_refusal, positive_int
from naspipe.errors import UserError

COMMAND = "rank"
HELP = "rank correlation of a trained supernet with a stand-alone ground truth, with intervals and noise floors"
ORDER = 63


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN", nargs="?", default=None,
                   help="a run directory with metrics.json and weights (none with --proxy)")
    p.add_argument("--truth", required=True, help="a truth folder written by naspipe truth")
    p.add_argument("--proxy", default=None, metavar="NAME",
                   help="rank with a zero-cost proxy at initialisation instead of a run: synflow, gradnorm or params "
                        "(the path's parameter count)")
    p.add_argument("--proxy-seeds", nargs="+", type=positive_int("--proxy-seeds", 0), default=None, metavar="S",
                   help="with --proxy: the initial weights' seeds (default 0); two or more: the mean score, and "
                        "the proxy's seed-to-seed tau")
    add_ensemble_arguments(p, "architecture")
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


def _check_proxy_flags(args: argparse.Namespace) -> None:
    """What a proxy ranking does not take (no run to compare, nothing held out to score on), and what only it does."""
    if args.proxy is None:
        if args.proxy_seeds is not None:
            raise UserError("--proxy-seeds goes with --proxy (the seeds of a proxy's initial weights)")
        if args.run_dir is None:
            raise UserError("give a RUN to rank, or --proxy synflow|gradnorm|params to rank at initialisation")
        return
    from naspipe.ranking.proxies import check_kind

    check_kind(args.proxy)
    given = [flag for flag, v in (("RUN", args.run_dir), ("--against", args.against), ("--seeds", args.seeds),
                                  ("--ensemble", args.ensemble), ("--ensemble-last", args.ensemble_last),
                                  ("--heldout", args.heldout)) if v]
    if given:
        raise UserError(f"--proxy {args.proxy} scores the truth's architectures at initialisation, with no run: "
                        f"drop {', '.join(given)}")


def run(args: argparse.Namespace) -> int:
    _check_proxy_flags(args)
    for d in (*([args.run_dir] if args.run_dir else []), *([args.against] if args.against else []), *args.seeds,
              *args.ensemble):
        _check_run(d)
    from naspipe.truth.records import load

    with os_refusal(f"--truth {args.truth[:80]!r}... cannot be read"):
        load(args.truth)  # refused before any model loads
    from naspipe.ranking.stats import RESAMPLES

    resamples = args.resamples or RESAMPLES
    if args.proxy is not None:
        from naspipe.ranking.proxies import rank_proxy

        report = rank_proxy(args.truth, args.proxy, seeds=args.proxy_seeds or (0,), space=args.space,
                            resamples=resamples)
    else:
        from naspipe.ranking.compare import rank

        report = rank(args.run_dir, args.truth, against=args.against, seeds=args.seeds, space=args.space,
                      heldout=args.heldout, resamples=resamples, ensemble=args.ensemble,
                      ensemble_last=args.ensemble_last or 0)
    print(json.dumps(report.to_dict(), allow_nan=False) if args.json else report.text())
    return 0
