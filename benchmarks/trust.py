"""Issue 23's table: does a scheduling policy change how well the supernet ranks architectures, beyond seed noise?

Every policy (the sequential reference, csp, csp-plan, bsp, pipedream, 2bw, pipemare, pipeoptim, and the
``delayed:D`` shared-layer variants of the quality table, run with csp) trains the supernet of the shipped
mini-benchmark's space on a real pipeline (one process per stage, ``naspipe.runtime``) for each of several
supernet seeds (uniform subnet stream of that seed). Each trained supernet scores every architecture of the
shipped ground truth (``data/truth/``, stand-alone accuracies) with the evaluator ``naspipe search`` uses, and
``naspipe.ranking.stats`` gives, per policy:

- Kendall tau against the truth: the mean over the seeds, with a 95% bootstrap interval over architectures
  (resampling architectures, the statistic being the mean over seeds), and the per-seed values;
- the regret of the pick (truth's best accuracy minus the truth accuracy of the run's top architecture), mean
  and per seed; whether the pick equals the reference's of the same seed; subnets/s; bit-identity to its
  reference (``naspipe.runfolder.results.verify``);
- against the reference: the paired difference of the mean tau with its interval, called a difference only
  where the interval clears the supernet seed band, otherwise "within seed noise".

Noise floors beside them: (a) truth seed vs seed (``seed_floor``); (b) reference supernet seed vs seed (mean
pairwise tau) and the seed band (largest gap of tau vs truth between two reference seeds).

Run: ``nice -n 10 .venv/bin/python benchmarks/trust.py`` (``--quick``: a small smoke run). Writes
``benchmarks/results/trust.json``, ``docs/figures/trust.html`` and the table between the markers of
``docs/trust.md`` (regenerate the page's table from the JSON alone with ``--table-only``).

The powered tables (issue 41): the same at the powered length of ``benchmarks/trust_curve.py`` with five seeds, on
two and on four stages (staleness grows with depth), each under its own ``--name`` (its JSON, its scores cache and
its table's markers in docs/trust.md)::

    nice -n 10 .venv/bin/python benchmarks/trust.py --name trust_powered_2stages --subnets 1600 --seeds 5 \
        --stages 2 --lr 0.02
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from itertools import combinations
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, estimate_text, replace_marked, table_markers, write_result

POLICIES = ("csp", "csp-plan", "bsp:4", "pipedream", "2bw", "pipemare", "pipeoptim")
SHARED_VARIANTS = ("delayed:4", "delayed:4+predict", "delayed:4+t1=K")
DOC = ROOT / "docs" / "trust.md"
FIGURE = ROOT / "docs" / "figures" / "trust.html"
BEGIN, END = "<!-- trust-table:begin (benchmarks/trust.py) -->", "<!-- trust-table:end -->"


def markers(name: str) -> tuple[str, str]:
    """The markers of ``name``'s table in docs/trust.md (``trust``: the original 200-subnet table's)."""
    return table_markers("trust", name, (BEGIN, END))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", default=str(ROOT / "data" / "truth" / "digits-truth"))
    ap.add_argument("--space", default=str(ROOT / "data" / "spaces" / "digits-truth.json"),
                    help="the truth's space (checked against the truth by digest)")
    ap.add_argument("--subnets", type=int, default=200)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3, help="supernet seeds 0..S-1 (default %(default)s)")
    ap.add_argument("--optimizer", default="momentum")
    ap.add_argument("--lr", type=float, default=0.05, help="the supernet's learning rate (default %(default)s)")
    ap.add_argument("--policies", nargs="*", default=list(POLICIES))
    ap.add_argument("--shared-variants", nargs="*", default=list(SHARED_VARIANTS))
    ap.add_argument("--name", default="trust", help="the result's name: NAME.json, its scores cache and its table "
                    "in docs/trust.md (default %(default)s)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the folder NAME.json is written to (default "
                    "benchmarks/results; any other folder writes neither the figure nor docs/trust.md)")
    ap.add_argument("--scores", default=None,
                    help="each trained run's scores of every architecture are kept here, so a run finished "
                         "before an interruption (or before the truth was built) is not trained again")
    ap.add_argument("--archs", type=int, default=None, help="score and rank the truth's first N architectures only "
                    "(default: all; --quick: 24)")
    ap.add_argument("--quick", action="store_true", help="16 subnets, 2 seeds, pipedream only, 24 architectures "
                    "(smoke test)")
    ap.add_argument("--table-only", action="store_true", help="rewrite docs/trust.md's table from trust.json")
    args = ap.parse_args()
    if args.scores is None:
        args.scores = str(Path(tempfile.gettempdir()) / f"naspipe-{args.name}-scores.json")
    if args.table_only:
        data = json.loads((args.out / f"{args.name}.json").read_text())
        write_doc_table(data, args.name)
        print(table(data))
        return
    if args.quick:
        args.subnets, args.seeds, args.policies, args.shared_variants = 16, 2, ["pipedream"], []
        args.archs = args.archs or 24
        args.scores = args.scores.replace(".json", "-quick.json")
        args.name = f"{args.name}_quick"

    import torch

    from naspipe.models import heldout_batches
    from naspipe.models.weights import load_weights
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.ranking.stats import estimate, kendall, pairwise_tau, pick, seed_floor, spearman
    from naspipe.runfolder.results import verify
    from naspipe.runtime import TrainConfig, train
    from naspipe.search.run import make_evaluator
    from naspipe.sequences.sequence import UniformStream
    from naspipe.spaces.shared import parse_shared
    from naspipe.spaces.space import resolve_space
    from naspipe.truth import choose_archs, load

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    space = resolve_space(args.space)
    optimizer, lr = args.optimizer, args.lr
    serial = parse_shared("serial")
    archs = list(choose_archs(space, None))  # the whole space, in the order a full truth lists it
    if args.archs:  # (the truth is read first: only its first N are scored)
        archs = list(load(args.truth).first(args.archs).archs)
    batches = heldout_batches(space)
    anneal, warmup = max(1, args.subnets // 3), max(1, args.subnets // 30)
    root = Path(tempfile.mkdtemp(prefix="naspipe-trust-"))
    key = {"space_digest": space.digest(), "subnets": args.subnets, "stages": args.stages,
           "optimizer": optimizer, "lr": lr, "archs": args.archs}
    cache_path = Path(args.scores)
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    if cache.get("key") != key:
        cache = {"key": key, "runs": {}}

    def score(model: Any) -> tuple[list[float], list[float]]:
        ev = make_evaluator(model, batches)
        res = [ev(a) for a in archs]
        return [r["accuracy"] for r in res], [r["loss"] for r in res]

    last = [t_start]

    def keep(label: str, seed: int, entry: dict[str, Any]) -> None:
        now = time.perf_counter()
        cache["wall_s"] = cache.get("wall_s", 0.0) + now - last[0]  # over every sitting (the cache resumes)
        last[0] = now
        cache["runs"][f"{label}|{seed}"] = entry
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(cache_path)
        _progress(label, seed, entry, time.perf_counter() - t_start)

    seeds = list(range(args.seeds))
    try:
        for seed in seeds:
            stream = UniformStream(space, seed, args.subnets)
            sequence = [stream[j] for j in range(args.subnets)]
            ref_dir = root / f"reference_s{seed}"
            if f"reference|{seed}" not in cache["runs"] or any(
                    f"{p}|{seed}" not in cache["runs"] for p in args.policies):
                ref = train_reference(space, stream, seed, serial, optimizer=optimizer, lr=lr)
                ref.save(ref_dir, weights=True)
                acc, loss = score(ref.model)
                keep("reference", seed, {"acc": acc, "loss": loss, "identical": True,
                                         "subnets_per_s": args.subnets / ref.wall_s})
            jobs: list[tuple[str, str, Any, Path | None]] = [
                (p, p.replace("K", str(anneal)).replace("W", str(warmup)), serial, ref_dir) for p in args.policies]
            jobs += [(f"csp, shared {v}", "csp", parse_shared(v.replace("K", str(anneal))), None)
                     for v in args.shared_variants]
            for label, pol, sh, against in jobs:
                if f"{label}|{seed}" in cache["runs"]:
                    continue
                if against is None:  # a shared-layer variant: checked against the reference of the same semantics
                    against = root / f"reference_{_slug(str(sh))}_s{seed}"
                    train_reference(space, stream, seed, sh, optimizer=optimizer, lr=lr).save(against)
                out = root / f"{_slug(label)}_s{seed}"
                cfg = TrainConfig.create(space, out, stages=args.stages, subnets=args.subnets, sequence=sequence,
                                         shared_layers=sh, policy=pol, optimizer=optimizer, lr=lr, seed=seed,
                                         progress=False, overwrite=True, timeout=600)
                result = train(cfg)
                same, _ = verify(out, against)
                acc, loss = score(load_weights(space, out, seed, sh))
                keep(label, seed, {"acc": acc, "loss": loss, "identical": bool(same),
                                   "subnets_per_s": float(result.metrics["subnets_per_s"])})
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    labels = ["reference", *args.policies, *(f"csp, shared {v}" for v in args.shared_variants)]
    runs = {lab: {s: cache["runs"][f"{lab}|{s}"] for s in seeds} for lab in labels}

    try:
        truth = load(args.truth) if not args.archs else load(args.truth).first(args.archs)
    except ValueError as e:
        raise SystemExit(f"every run is trained and its scores kept in {cache_path}; the truth is not ready "
                         f"({e}): run this again when it is") from None
    ts = truth.settings
    if ts.space_digest != space.digest():
        raise SystemExit(f"{args.truth} is not a truth of {args.space} (space digest {ts.space_digest[:12]})")
    at = {a: i for i, a in enumerate(archs)}
    keep_idx = [at[a] for a in truth.archs]  # the truth's architectures (all of them, or its sample)
    for per_seed in runs.values():
        for r in per_seed.values():
            r["acc"], r["loss"] = [r["acc"][i] for i in keep_idx], [r["loss"][i] for i in keep_idx]
    archs = list(truth.archs)
    target = [truth.mean_accuracy(a) for a in archs]

    import numpy as np

    t = np.asarray(target)
    ref_runs = runs["reference"]
    floor_a = seed_floor(truth)
    floor_b = pairwise_tau([ref_runs[s]["acc"] for s in seeds])
    ref_taus = [kendall(target, ref_runs[s]["acc"]) for s in seeds]
    band = max((abs(a - b) for a, b in combinations(ref_taus, 2)), default=0.0)
    ref_picks = {s: pick(ref_runs[s]["acc"], ref_runs[s]["loss"]) for s in seeds}
    best = float(t.max())
    rows = []
    refs = [np.asarray(ref_runs[s]["acc"]) for s in seeds]
    for label, per_seed in runs.items():
        est = [np.asarray(per_seed[s]["acc"]) for s in seeds]
        mean_tau = estimate(lambda i, est=est: float(np.mean([kendall(t[i], e[i]) for e in est])), len(t))
        diff = estimate(lambda i, est=est: float(np.mean([kendall(t[i], e[i]) - kendall(t[i], r[i])
                                                          for e, r in zip(est, refs, strict=True)])), len(t))
        picks = [pick(per_seed[s]["acc"], per_seed[s]["loss"]) for s in seeds]
        regrets = [best - target[p] for p in picks]
        is_ref = label == "reference"
        rows.append({
            "policy": label, "kendall_tau": mean_tau.to_dict(),
            "tau_per_seed": [kendall(target, per_seed[s]["acc"]) for s in seeds],
            "spearman_rho_mean": _mean([spearman(target, per_seed[s]["acc"]) for s in seeds]),
            "regret_mean": _mean(regrets), "regret_per_seed": regrets,
            "picks": [list(archs[p]) for p in picks], "pick_names": [truth.names[archs[p]] for p in picks],
            "same_pick_as_reference": sum(p == ref_picks[s] for p, s in zip(picks, seeds, strict=True)),
            "identical_to_reference": [per_seed[s]["identical"] for s in seeds],
            "subnets_per_s": _mean([per_seed[s]["subnets_per_s"] for s in seeds]),
            "tau_difference_vs_reference": None if is_ref else diff.to_dict(),
            # a shared-layer variant is bit-identical to the reference of its own shared-layer semantics,
            # not to the serial reference its tau is compared with
            "verdict": None if is_ref else ("identical to the reference" if all(
                per_seed[s]["identical"] for s in seeds) and not label.startswith("csp, shared")
                else _verdict(diff.low, diff.high, band)),
        })
    scatter = {"truth_accuracy": target, "supernet_accuracy": ref_runs[seeds[0]]["acc"],
               "names": [truth.names[a] for a in archs], "seed": seeds[0]}
    data = {
        "config": {"truth": str(Path(args.truth).relative_to(ROOT)) if Path(args.truth).is_absolute()
                   and Path(args.truth).is_relative_to(ROOT) else args.truth,
                   "space": ts.space, "space_digest": ts.space_digest, "truth_steps": ts.steps,
                   "truth_seeds": list(ts.seeds), "architectures": len(archs), "subnets": args.subnets,
                   "stages": args.stages, "supernet_seeds": seeds, "optimizer": optimizer, "lr": lr,
                   "shared_layers": "serial", "t1_anneal": anneal, "warmup": warmup,
                   "heldout_samples": sum(len(b[1]) for b in batches), "best_truth_accuracy": best,
                   "wall_s": round(cache.get("wall_s", 0.0), 1)},
        "floors": {"truth_seed_vs_seed": floor_a.to_dict() if floor_a else None,
                   "supernet_seed_vs_seed": floor_b.to_dict() if floor_b else None,
                   "reference_tau_per_seed": ref_taus, "seed_band": band},
        "rows": rows,
        "scatter": scatter,
    }
    write_result(args.name, data, args.out)
    if not args.quick and args.out.resolve() == RESULTS.resolve():
        if args.name == "trust":
            write_figure(data)
        write_doc_table(data, args.name)
    print()
    print(table(data))


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)


def _verdict(low: float, high: float, band: float) -> str:
    from naspipe.ranking.stats import Estimate, verdict

    return verdict(Estimate((low + high) / 2, low, high), band)


def _progress(label: str, seed: int, r: dict[str, Any], elapsed: float) -> None:
    print(json.dumps({"policy": label, "seed": seed, "mean_accuracy": round(sum(r["acc"]) / len(r["acc"]), 4),
                      "identical": r["identical"], "subnets_per_s": round(r["subnets_per_s"], 1),
                      "elapsed_s": round(elapsed, 1)}), flush=True)


def table(data: dict[str, Any]) -> str:
    """The markdown table of ``trust.json`` (what docs/trust.md shows)."""
    c, f = data["config"], data["floors"]

    est = estimate_text  # (a bound that is None, a column tying every architecture: n/a)

    n = len(c["supernet_seeds"])
    lines = [f"{c['space']} truth ({c['architectures']} architectures x {len(c['truth_seeds'])} seeds, "
             f"{c['truth_steps']} steps stand-alone); supernets: {c['subnets']} subnets, {c['stages']} stages, "
             f"{c['optimizer']} lr {c['lr']}, {n} seeds ({', '.join(map(str, c['supernet_seeds']))}); "
             f"{c['heldout_samples']} held-out samples. Benchmark wall time {c['wall_s'] / 60:.1f} min.",
             "",
             f"Noise floors (Kendall tau): (a) truth seed vs seed **{est(f['truth_seed_vs_seed'])}**; "
             f"(b) reference supernet seed vs seed **{est(f['supernet_seed_vs_seed'])}**; reference tau vs truth "
             f"per seed {', '.join(f'{x:.2f}' for x in f['reference_tau_per_seed'])} (seed band "
             f"+-{f['seed_band']:.2f}).",
             "",
             f"| policy | Kendall tau vs truth, mean of {n} seeds [95% interval] | per seed | regret of the pick "
             f"(mean; per seed) | same pick as reference (of {n}) | bit-identical to its reference | subnets/s "
             "| tau - reference's [95% interval] | verdict |",
             "|---|---:|---|---|:---:|:---:|---:|---:|---|"]
    for r in data["rows"]:
        ident = r["identical_to_reference"]
        lines.append(
            f"| {r['policy']} | {est(r['kendall_tau'])} | {', '.join(f'{x:.2f}' for x in r['tau_per_seed'])} | "
            f"{r['regret_mean']:.4f}; {', '.join(f'{x:.3f}' for x in r['regret_per_seed'])} | "
            f"{r['same_pick_as_reference']}/{n} | {'yes' if all(ident) else ('no' if not any(ident) else 'some')} | "
            f"{r['subnets_per_s']:.1f} | {est(r['tau_difference_vs_reference']) if r['verdict'] else '-'} | "
            f"{r['verdict'] or '-'} |")
    return "\n".join(lines)


def write_doc_table(data: dict[str, Any], name: str = "trust") -> None:
    """Replace the block between ``name``'s markers in docs/trust.md (appended at the end when there are none)."""
    replace_marked(DOC, *markers(name), table(data))


def write_figure(data: dict[str, Any]) -> None:
    """docs/figures/trust.html: tau per policy with intervals over the floor bands; supernet vs stand-alone."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    f, rows, sc = data["floors"], data["rows"], data["scatter"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], subplot_titles=(
        "Kendall tau vs stand-alone truth (mean of seeds, 95% interval)",
        f"supernet (reference, seed {sc['seed']}) vs stand-alone accuracy"))
    names = [r["policy"] for r in rows]
    for key, colour, label in (("truth_seed_vs_seed", "rgba(44,160,44,0.15)", "(a) truth seed vs seed"),
                               ("supernet_seed_vs_seed", "rgba(255,127,14,0.15)", "(b) supernet seed vs seed")):
        e = f[key]
        if e:
            fig.add_hrect(y0=e["low"], y1=e["high"], fillcolor=colour, line_width=0, row=1, col=1,
                          annotation_text=label, annotation_position="top left")
    ref = next(r for r in rows if r["policy"] == "reference")["tau_per_seed"]
    fig.add_hrect(y0=min(ref), y1=max(ref), fillcolor="rgba(120,120,120,0.12)", line_width=0, row=1, col=1,
                  annotation_text="reference tau over seeds", annotation_position="bottom left")
    fig.add_trace(go.Scatter(
        x=names, y=[r["kendall_tau"]["value"] for r in rows], mode="markers", name="mean tau",
        error_y={"type": "data", "symmetric": False,
                 "array": [r["kendall_tau"]["high"] - r["kendall_tau"]["value"] for r in rows],
                 "arrayminus": [r["kendall_tau"]["value"] - r["kendall_tau"]["low"] for r in rows]}), row=1, col=1)
    for k in range(len(rows[0]["tau_per_seed"])):
        fig.add_trace(go.Scatter(x=names, y=[r["tau_per_seed"][k] for r in rows], mode="markers",
                                 marker={"symbol": "x", "size": 6, "opacity": 0.5}, name=f"seed {k}"), row=1, col=1)
    fig.add_trace(go.Scatter(x=sc["truth_accuracy"], y=sc["supernet_accuracy"], mode="markers", text=sc["names"],
                             name="architecture", marker={"size": 5}), row=1, col=2)
    fig.update_xaxes(title_text="stand-alone accuracy (truth, mean of seeds)", row=1, col=2)
    fig.update_yaxes(title_text="supernet accuracy", row=1, col=2)
    fig.update_yaxes(title_text="Kendall tau", row=1, col=1)
    fig.update_layout(height=520, width=1300, title="Can you trust the search? (benchmarks/trust.py)")
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(FIGURE, include_plotlyjs="cdn")


if __name__ == "__main__":
    main()
