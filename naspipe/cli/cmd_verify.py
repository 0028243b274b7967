"""``naspipe verify DIR_A DIR_B``: are two runs bit-identical (per-subnet losses and every tensor)?

Exit 0 when identical; 1 when the runs were made with different configurations (``naspipe.runfolder.runs``: seed, space,
a user supernet's source and initial weights, the update rule of a non-causal policy, optimizer, lr, threads,
shared-layer policy, sequence digest; named first) or a subnet or tensor differs; 2 when a
file is missing or malformed (a subnet twice, a truncated line, an empty run), naming the file and line.
"""

from __future__ import annotations

import argparse

COMMAND = "verify"
HELP = "compare two run directories bit for bit (losses.csv and parameter hashes)"
ORDER = 45


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir_a", metavar="DIR_A", help="a run directory (losses.csv, params.json)")
    p.add_argument("dir_b", metavar="DIR_B", help="another run directory")


def run(args: argparse.Namespace) -> int:
    from naspipe.runfolder.results import verify

    ok, message = verify(args.dir_a, args.dir_b)
    print(message if ok else f"differ: {message}")
    return 0 if ok else 1
