"""Issue 27, item 2: which ``--shared-layers`` semantics should a user's ``Fixed`` blocks (stem, head) follow by
default? Measured on a user-style supernet, side by side in one run.

The supernet is ``data/supernets/spos_digits.py`` (a user's own module: SPOS-style ShuffleNet/Xception choice
blocks between a ``Fixed`` stem and a ``Fixed`` head, 4^4 = 256 architectures). First a small ground truth is
built with ``naspipe truth`` (a seeded sample of architectures, each trained stand-alone). Then the same
supernet is trained with ``naspipe train`` (csp, 2 stages, the same seed and sequence) once per semantics:
``frozen``, ``serial``, ``delayed:D`` and ``delayed:D+predict`` with D = 4 as in the quality table
(``benchmarks/quality.py``; D at least the subnets in flight, about twice the stage count). Each run is
compared with the truth by ``naspipe.rank``: the stand-alone accuracy of the architecture the supernet picks,
its regret, the Kendall tau of the ranking, the supernet's mean held-out accuracy over the truth's
architectures, and the run's throughput (subnets/s over the training time, start-up excluded; ratios to
``frozen`` printed, measured in this one run).

Run: ``nice -n 10 .venv/bin/python benchmarks/shared_layers.py`` (``--quick``: a smaller smoke run). Prints
JSON, then a markdown table; writes ``benchmarks/results/shared_layers.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, write_result

SUPERNETS = ROOT / "data" / "supernets"
SEMANTICS = ("frozen", "serial", "delayed:4", "delayed:4+predict")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="spos_digits:supernet")
    ap.add_argument("--subnets", type=int, default=300)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--truth-sample", type=int, default=24, help="architectures in the ground truth")
    ap.add_argument("--truth-steps", type=int, default=300, help="stand-alone training steps per architecture")
    ap.add_argument("--truth-seeds", type=int, default=1)
    ap.add_argument("--semantics", nargs="*", default=list(SEMANTICS))
    ap.add_argument("--quick", action="store_true", help="60 subnets, 8 architectures of 60 steps (smoke test)")
    ap.add_argument("--keep", default=None, help="keep the truth and the run directories here")
    args = ap.parse_args()
    if args.quick:
        args.subnets, args.truth_sample, args.truth_steps = 60, 8, 60

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPERNETS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    sys.path.insert(0, str(SUPERNETS))
    naspipe_cmd = [sys.executable, "-c", "import sys; from naspipe.cli import main; sys.exit(main())"]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="naspipe-shared-"))
    root.mkdir(parents=True, exist_ok=True)
    truth_dir = root / "truth"
    subprocess.run([*naspipe_cmd, "truth", "--space", args.space, "--out", str(truth_dir),
                    "--steps", str(args.truth_steps), "--seeds", str(args.truth_seeds),
                    "--sample", str(args.truth_sample), "--optimizer", args.optimizer, "--workers", "1",
                    "--no-progress"], check=True, env=env)

    import naspipe

    rows = []
    for sem in args.semantics:
        out = root / sem.replace(":", "_").replace("+", "_")
        done = subprocess.run([*naspipe_cmd, "train", "--space", args.space, "--stages", str(args.stages),
                               "--subnets", str(args.subnets), "--seed", str(args.seed), "--policy", "csp",
                               "--shared-layers", sem, "--optimizer", args.optimizer, "--out", str(out),
                               "--overwrite", "--no-progress", "--json", "--timeout", "300"],
                              check=True, env=env, capture_output=True, text=True)
        metrics = json.loads(done.stdout.strip().splitlines()[-1])
        ranked = naspipe.rank(out, truth_dir)
        report, scored = ranked.to_dict(), ranked.run.accuracy
        vs = report["vs_truth"]
        rows.append({"shared_layers": sem, "pick": report["pick"]["name"],
                     "pick_truth_accuracy": report["pick"]["truth_accuracy"],
                     "regret": vs["regret"]["value"], "kendall_tau": vs["kendall_tau"]["value"],
                     "supernet_mean_accuracy": sum(scored) / len(scored),
                     "subnets_per_s": metrics["subnets_per_s"], "final_loss": metrics.get("final_loss")})
        print(json.dumps(rows[-1]), flush=True)
    base = next((r for r in rows if r["shared_layers"] == "frozen"), rows[0])
    for r in rows:
        r["throughput_vs_frozen"] = r["subnets_per_s"] / base["subnets_per_s"]
    truth_best = report["truth"]["best_accuracy"]
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    config = {"space": args.space, "subnets": args.subnets, "stages": args.stages, "policy": "csp",
              "optimizer": args.optimizer, "seed": args.seed, "truth_sample": args.truth_sample,
              "truth_steps": args.truth_steps, "truth_seeds": args.truth_seeds, "truth_best_accuracy": truth_best}
    write_result("shared_layers" if not args.quick else "shared_layers_quick", {"config": config, "rows": rows})
    print()
    print(table(rows, config))


def table(rows: list[dict], config: dict) -> str:
    lines = [f"{config['space']}, {config['subnets']} subnets, {config['stages']} stages csp, {config['optimizer']}; "
             f"truth: {config['truth_sample']} architectures x {config['truth_seeds']} seeds, "
             f"{config['truth_steps']} steps, best stand-alone accuracy {config['truth_best_accuracy']:.4f}",
             "",
             "| shared layers | pick's stand-alone accuracy | regret | Kendall tau vs truth | supernet mean accuracy "
             "| subnets/s | vs frozen |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tau = "n/a" if r["kendall_tau"] is None else f"{r['kendall_tau']:.3f}"
        lines.append(f"| {r['shared_layers']} | {r['pick_truth_accuracy']:.4f} | {r['regret']:.4f} | {tau} | "
                     f"{r['supernet_mean_accuracy']:.4f} | {r['subnets_per_s']:.1f} | "
                     f"{r['throughput_vs_frozen']:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
