"""``naspipe report RUN_DIR [--reference REF]``: a self-contained HTML report that leads with the answer
(verdict, subnets/s, utilisation against simulation and bound, idle time by cause), then Gantt, DAG, hit rate."""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.cli.common import named, positive_int
from naspipe.errors import UserError

COMMAND = "report"
HELP = "write a self-contained HTML report of a run directory (needs RUN_DIR/trace.json)"
ORDER = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory holding trace.json (or a trace file)")
    p.add_argument("--out", type=named("--out", "file"), default=None,
                   help="output HTML file (default RUN_DIR/report.html)")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=TRACE",
                   help="another trace (file or run directory) drawn in the Gantt, e.g. simulated=sim/trace.json")
    p.add_argument("--max-events", type=positive_int("--max-events"), default=20_000,
                   help="most events drawn per trace in the Gantt (default %(default)s)")
    p.add_argument("--reference", default=None, metavar="REF",
                   help="sequential reference run to verify against (default: RUN_DIR/../reference if present)")
    p.add_argument("--dag-subnets", type=positive_int("--dag-subnets", 0), default=12,
                   help="subnets in the DAG excerpt, 0 for none (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    extra = {}
    for item in args.compare:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--compare expects NAME=TRACE, got {item!r}")
        extra[name] = Path(path)
    from naspipe.viz.report import write_report

    out = write_report(args.run_dir, args.out, extra=extra, max_events=args.max_events,
                       dag_subnets=args.dag_subnets, reference=args.reference)
    print(out)
    return 0
