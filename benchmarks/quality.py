"""Issue 5's table: what each scheduling policy does to the trained supernet, against the sequential reference.

The same supernet (digits-cnn, seed 0) is trained on the same subnet sequence with every policy on a real
pipeline (one process per stage, ``naspipe.runtime``) and once by the sequential reference trainer. One fixed
set of evaluation subnets (uniform, its own seed) is evaluated on the held-out digits with each run's final
weights (plus csp with ``delayed:D`` shared layers, plain and with the PipeOptim / PipeMare T1 corrections;
those are checked bit for bit against a reference trained with the same shared-layer policy, and ranked
against the ``--shared-layers`` reference). Reported per policy: mean held-out accuracy and loss over the
evaluation subnets, the Kendall tau of their accuracy ranking against the reference's
(``scipy.stats.kendalltau``; 1 = the search would rank subnets identically), whether the run equals the
reference bit for bit (``naspipe.runfolder.results.verify``: every loss and every parameter tensor), and the throughput
(subnets/s from the run's metrics; the reference's is its single-process loop).

Run: ``.venv/bin/python benchmarks/quality.py`` (``--quick`` for a small smoke run). Prints JSON, then a
markdown table; writes ``benchmarks/results/quality.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from _common import write_result

POLICIES = ("csp", "bsp:4", "pipedream", "pipedream:vsync", "2bw", "pipemare", "pipemare:t1=K,t2=0.1,warmup=W",
            "pipeoptim", "pipeoptim:s=inflight")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="digits-cnn")
    ap.add_argument("--subnets", type=int, default=600)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--optimizer", default="momentum")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--shared-layers", default="serial")
    ap.add_argument("--eval-subnets", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policies", nargs="*", default=list(POLICIES))
    ap.add_argument("--shared-variants", nargs="*", default=["delayed:4", "delayed:4+predict", "delayed:4+t1=K"],
                    help="extra csp runs with these shared-layer policies (K: a third of the subnets); each is "
                         "checked bit for bit against a reference trained with the same shared-layer policy")
    ap.add_argument("--quick", action="store_true", help="60 subnets, 10 evaluation subnets (smoke test)")
    ap.add_argument("--keep", default=None, help="keep the run directories here")
    args = ap.parse_args()
    if args.quick:
        args.subnets, args.eval_subnets = 60, 10

    import torch
    from scipy.stats import kendalltau

    from naspipe.models import evaluate, heldout_batches
    from naspipe.models.weights import load_weights
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runfolder.results import verify
    from naspipe.runtime import TrainConfig, train
    from naspipe.sequences.sequence import UniformStream
    from naspipe.spaces.shared import parse_shared
    from naspipe.spaces.space import preset

    torch.set_num_threads(1)
    space = preset(args.space)
    shared = parse_shared(args.shared_layers)
    stream = UniformStream(space, args.seed, args.subnets)
    sequence = [stream[j] for j in range(args.subnets)]
    eval_stream = UniformStream(space, 10_000 + args.seed, args.eval_subnets)
    eval_subnets = [eval_stream[j] for j in range(args.eval_subnets)]
    batches = heldout_batches(space)
    anneal, warmup = max(1, args.subnets // 3), max(1, args.subnets // 30)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="naspipe-quality-"))
    root.mkdir(parents=True, exist_ok=True)

    def scores(model: torch.nn.Module) -> tuple[list[float], list[float]]:
        res = [evaluate(model, s, batches) for s in eval_subnets]
        return [r["accuracy"] for r in res], [r["loss"] for r in res]

    ref = train_reference(space, stream, args.seed, shared, optimizer=args.optimizer, lr=args.lr)
    ref_dir = ref.save(root / "reference", weights=True)
    ref_wall = ref.wall_s
    ref_acc, ref_loss = scores(ref.model)
    rows = [{"policy": "reference (sequential, 1 process)", "mean_accuracy": sum(ref_acc) / len(ref_acc),
             "mean_loss": sum(ref_loss) / len(ref_loss), "kendall_tau": 1.0, "identical": True,
             "subnets_per_s": args.subnets / ref_wall, "final_train_loss": ref.losses[args.subnets - 1]}]
    for policy in args.policies:
        pol = policy.replace("K", str(anneal)).replace("W", str(warmup))
        out = root / pol.replace(":", "_").replace(",", "_").replace("=", "")
        cfg = TrainConfig.create(space, out, stages=args.stages, subnets=args.subnets, sequence=sequence,
                                 shared_layers=shared, policy=pol, optimizer=args.optimizer, lr=args.lr,
                                 seed=args.seed, progress=False, overwrite=True, timeout=300)
        result = train(cfg)
        same, _ = verify(out, ref_dir)
        model = load_weights(space, out, args.seed, shared)
        acc, loss = scores(model)
        losses = [float(x) for x in _read_losses(out)]
        tau = kendalltau(ref_acc, acc).statistic
        rows.append({"policy": pol, "mean_accuracy": sum(acc) / len(acc), "mean_loss": sum(loss) / len(loss),
                     "kendall_tau": None if tau != tau else float(tau), "identical": bool(same),
                     "subnets_per_s": result.metrics["subnets_per_s"], "final_train_loss": losses[-1]})
        print(json.dumps(rows[-1]), flush=True)
    for variant in args.shared_variants:
        sh = parse_shared(variant.replace("K", str(anneal)))
        vref_dir = root / f"reference_{str(sh).replace(':', '').replace('+', '_').replace('=', '')}"
        train_reference(space, stream, args.seed, sh, optimizer=args.optimizer, lr=args.lr).save(vref_dir)
        out = root / f"csp_{vref_dir.name}"
        cfg = TrainConfig.create(space, out, stages=args.stages, subnets=args.subnets, sequence=sequence,
                                 shared_layers=sh, policy="csp", optimizer=args.optimizer, lr=args.lr,
                                 seed=args.seed, progress=False, overwrite=True, timeout=300)
        result = train(cfg)
        same, _ = verify(out, vref_dir)  # against the reference with the same shared-layer semantics
        acc, loss = scores(load_weights(space, out, args.seed, sh))
        tau = kendalltau(ref_acc, acc).statistic
        rows.append({"policy": f"csp, shared {sh}", "mean_accuracy": sum(acc) / len(acc),
                     "mean_loss": sum(loss) / len(loss), "kendall_tau": None if tau != tau else float(tau),
                     "identical": bool(same), "identical_to": f"reference with shared {sh}",
                     "subnets_per_s": result.metrics["subnets_per_s"],
                     "final_train_loss": _read_losses(out)[-1]})
        print(json.dumps(rows[-1]), flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    config = {"space": args.space, "subnets": args.subnets, "stages": args.stages, "optimizer": args.optimizer,
              "lr": args.lr, "shared_layers": str(shared), "eval_subnets": args.eval_subnets, "seed": args.seed,
              "heldout_samples": sum(len(b[1]) for b in batches), "t1_anneal": anneal, "warmup": warmup}
    write_result("quality" if not args.quick else "quality_quick", {"config": config, "rows": rows})
    print()
    print(table(rows, config))


def _read_losses(run_dir: Path) -> list[float]:
    from naspipe.runfolder.results import read_losses

    losses = read_losses(run_dir / "losses.csv")
    return [losses[j] for j in sorted(losses)]


def table(rows: list[dict], config: dict) -> str:
    lines = [f"{config['space']}, {config['subnets']} subnets, {config['stages']} stages, {config['optimizer']}, "
             f"shared layers {config['shared_layers']}; {config['eval_subnets']} evaluation subnets on "
             f"{config['heldout_samples']} held-out samples",
             "",
             "| policy | mean accuracy | mean loss | Kendall tau vs reference | bit-identical to its reference "
             "| subnets/s |",
             "|---|---:|---:|---:|:---:|---:|"]
    for r in rows:
        tau = "n/a" if r["kendall_tau"] is None else f"{r['kendall_tau']:.3f}"
        lines.append(f"| {r['policy']} | {r['mean_accuracy']:.4f} | {r['mean_loss']:.4f} | {tau} | "
                     f"{'yes' if r['identical'] else 'no'} | {r['subnets_per_s']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
