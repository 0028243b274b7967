"""Issue 3's reproducibility acceptance: every parallel run verifies bit for bit against the reference.

The matrix: presets ``tiny-transformer`` and ``digits-cnn``; 200 subnets; CSP on 1, 2, 3 and 4 stages;
without and with ``--jitter-ms``; three runs each; shared layers ``frozen``, ``serial`` and ``delayed:2``.
For each (preset, shared-layer policy) the sequential reference (``naspipe.oracle.sequential_trainer``) is trained once;
every run is compared with ``naspipe.runfolder.results.verify`` (all losses and every parameter tensor). The JSON
summary lists every run (verified or the first difference, subnets/s) and the totals; the exit code is 1
if any run differs.

``--quick``: 40 subnets, one run per cell (a smoke test of the whole matrix, a few minutes), written to
``results/reproducibility_matrix_quick.json``.

Run: ``.venv/bin/python benchmarks/reproducibility_matrix.py [--quick]``
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_result

from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import verify
from naspipe.runtime import TrainConfig, train
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import preset

SPACES = ("tiny-transformer", "digits-cnn")
SHARED = ("frozen", "serial", "delayed:2")
STAGES = (1, 2, 3, 4)


def reference(space: str, shared: str, n: int, seed: int, out: Path) -> float:
    sp = preset(space)
    res = train_reference(sp, UniformStream(sp, seed, n), seed, parse_shared(shared))
    res.save(out)
    return res.wall_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 subnets, one run per cell")
    ap.add_argument("--subnets", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--jitter-ms", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spaces", nargs="*", default=list(SPACES))
    ap.add_argument("--shared", nargs="*", default=list(SHARED))
    args = ap.parse_args()
    n = args.subnets or (40 if args.quick else 200)
    repeats = args.runs or (1 if args.quick else 3)
    root = Path(tempfile.mkdtemp(prefix="naspipe-matrix-"))
    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for space, shared in itertools.product(args.spaces, args.shared):
        ref = root / f"ref-{space}-{shared.replace(':', '')}"
        ref_s = reference(space, shared, n, args.seed, ref)
        for stages, jitter, r in itertools.product(STAGES, (0.0, args.jitter_ms), range(repeats)):
            out = root / f"{space}-{shared.replace(':', '')}-{stages}-{jitter:g}-{r}"
            cfg = TrainConfig.create(space, out, stages=stages, subnets=n, seed=args.seed, shared_layers=shared,
                                     policy="csp", jitter_ms=jitter, progress=False, timeout=300)
            row: dict[str, Any] = {"space": space, "shared_layers": shared, "stages": stages, "jitter_ms": jitter,
                                   "run": r, "reference_s": ref_s}
            try:
                m = train(cfg).metrics
                ok, msg = verify(out, ref)
                row.update(verified=ok, message=msg, subnets_per_s=m["subnets_per_s"], wall_s=m["wall_s"],
                           utilization=m["utilization"])
            except Exception as e:  # noqa: BLE001 - a failed run is a failed cell, the matrix goes on
                row.update(verified=False, message=f"{type(e).__name__}: {e}")
            runs.append(row)
            print(f"{space:17s} {shared:10s} P={stages} jitter={jitter:g} run {r}: "
                  f"{'ok' if row['verified'] else 'DIFFERS'} {row['message'][:80]}", file=sys.stderr, flush=True)
    failed = [r for r in runs if not r["verified"]]
    write_result("reproducibility_matrix" + ("_quick" if args.quick else ""), {
        "subnets": n, "runs_per_cell": repeats, "jitter_ms": args.jitter_ms, "seed": args.seed,
        "spaces": args.spaces, "shared_layers": args.shared, "stages": list(STAGES), "policy": "csp",
        "total": len(runs), "verified": len(runs) - len(failed), "failed": len(failed),
        "all_verified": not failed, "failures": failed, "seconds": time.perf_counter() - t0, "runs": runs,
    })
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
