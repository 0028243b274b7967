"""Issue 41, item 1, the length curve: how does the supernet's ranking against the truth grow with its length?

For each sampler (``uniform``, ``fair``, ``spread``) and each supernet seed (0, 1, 2) the sequential reference
(``naspipe.oracle.sequential_trainer``; csp equals it bit for bit, ``benchmarks/trust.py``) trains the supernet of
the shipped mini-benchmark's space (``data/spaces/digits-truth.json``; momentum, lr 0.05, ``serial`` shared layers,
as ``benchmarks/trust.py``) under the truth's CPU kernels (``portable``: the truth records them). At each length
(200, 400, 800, 1600 and 3200 subnets) the supernet scores every architecture of the shipped truth
(``data/truth/digits-truth``) with the evaluator ``naspipe search`` and ``naspipe rank`` use, and
``naspipe.ranking.stats`` gives per sampler and length, each with a 95% bootstrap interval over architectures
(the statistic being the mean over the seeds):

- Kendall tau and Spearman rho against the truth (and the per-seed taus);
- the top-10% overlap and the regret of the pick (truth's best accuracy minus the truth accuracy of the
  architecture the supernet ranks first, as ``naspipe search`` orders);
- the supernet seed-to-seed tau (floor (b): mean pairwise tau between the seeds' supernets at that length) and the
  seed band (largest gap between two seeds' taus against the truth).

One run per (sampler, seed) gives every length: the reference trains subnet ``j`` on batch ``j`` of the seed at one
learning rate (nothing depends on the total length), and the first ``N`` subnets of a seeded stream do not depend
on its length (the benchmark checks both: the streams' prefixes at every length before training, and
``tests/benchmarks/test_trust_curve.py`` that the supernet scored at ``N`` subnets of a longer run is bit for bit
the one a run of ``N`` subnets ends with). The longest run's ``on_subnet_done`` hook scores a copy of the supernet
after subnet ``N`` for each length ``N``. So the lengths of one sampler are nested, not independent: the points of
a curve share their early training, and their differences are not those of independent runs.

**The powered length** of a sampler is the shortest length from which on no longer length's seed-to-seed tau is
clearly higher: for it and every longer length, the upper bound of its 95% interval reaches the lower bound of
every longer length's (lengths from a collapse on, below, are left out). That is where the supernets of two seeds
stop agreeing measurably more with more training; a dip inside the plateau (seed noise: 0.64, 0.62, 0.67 with
overlapping intervals) does not push it further out. Where only the longest length qualifies, the plateau is not
shown within the lengths measured (said so, not a length). The benchmark's powered length is the largest of the
samplers' (every sampler has reached its plateau there).

A supernet can collapse in a long run (momentum at lr 0.05: one seed's uniform supernet of this space jumped to a
loss of 2.9 near subnet 1400 and then predicted one class, loss ln 10, scoring every architecture alike). A length
at which any seed's supernet scores more than half the architectures at one accuracy is flagged (``collapsed
seeds``, beside each seed's mean training loss over the 100 subnets before the length), and it and the longer
lengths are left out of the rule: a collapse is no plateau.

Run: ``nice -n 10 .venv/bin/python benchmarks/trust_curve.py`` (``--quick``: lengths 20 and 40, 2 seeds, uniform
and spread, 200 resamples, the truth's first 24 architectures: a smoke run in seconds, writing
``trust_curve_quick.json`` only). Writes
``benchmarks/results/trust_curve.json``, ``docs/figures/trust_curve.html`` and the table between the markers of
``docs/trust.md`` (``--table-only``: regenerate the table from the JSON alone); with another ``--out``, the JSON
there only. Each run's scores are kept in
``--scores`` as it finishes, so an interrupted benchmark resumes where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from itertools import combinations
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, estimate_text, replace_marked, table_markers, write_result

LENGTHS = (200, 400, 800, 1600, 3200)
SAMPLERS = ("uniform", "fair", "spread")
DOC = ROOT / "docs" / "trust.md"
FIGURE = ROOT / "docs" / "figures" / "trust_curve.html"
BEGIN, END = "<!-- trust-curve-table:begin (benchmarks/trust_curve.py) -->", "<!-- trust-curve-table:end -->"
NAME = "trust_curve"


def markers(name: str) -> tuple[str, str]:
    """The markers of ``name``'s table in docs/trust.md (``trust_curve``: the digits truth's curve)."""
    return table_markers(NAME, name, (BEGIN, END))


def figure_path(name: str) -> Path:
    return FIGURE.with_name(f"{name}.html")
LOSS_WINDOW = 100  # the training loss at a length: the mean over the subnets just before it
RULE = ("the powered length is the shortest length from which on (it and every longer one) no longer length's "
        "supernet seed-to-seed tau is clearly higher: the upper bound of its 95% interval reaches the lower bound of "
        "every longer length's; the lengths from the first at "
        "which a seed's supernet collapsed (scores more than half the architectures at one accuracy) are left out, "
        "so the longest length is the last before a collapse")


QUICK_ARCHS = 24  # the smoke run ranks the truth's first 24 architectures (scoring all 216 was most of its time)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", default=str(ROOT / "data" / "truth" / "digits-truth"))
    ap.add_argument("--space", default=str(ROOT / "data" / "spaces" / "digits-truth.json"),
                    help="the truth's space (checked against the truth by digest)")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS),
                    help="subnet counts (default %(default)s); one run of the longest per sampler and seed")
    ap.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    ap.add_argument("--seeds", type=int, default=3, help="supernet seeds 0..S-1 (default %(default)s)")
    ap.add_argument("--optimizer", default="momentum")
    ap.add_argument("--lr", type=float, default=0.05, help="the supernet's learning rate (default %(default)s)")
    ap.add_argument("--kernels", default=None, help="CPU kernels kind (default: the one the truth was built with)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of every interval")
    ap.add_argument("--scores", default=None,
                    help="each run's scores at every length are kept here as it finishes, so an interrupted run "
                         "resumes (default: naspipe-trust-curve-scores.json in the temporary folder)")
    ap.add_argument("--out", default=str(RESULTS),
                    help="folder of the JSON result (default %(default)s; the figure and the docs table are "
                         "written only with the default)")
    ap.add_argument("--name", default=NAME, help="the result's name: NAME.json, its scores cache, its figure "
                    "docs/figures/NAME.html and its table in docs/trust.md (default %(default)s)")
    ap.add_argument("--archs", type=int, default=None, help="rank the truth's first N architectures only (default: "
                    f"all; --quick: {QUICK_ARCHS})")
    ap.add_argument("--quick", action="store_true",
                    help="lengths 20 and 40, 2 seeds, uniform and spread, 200 resamples, 24 architectures (smoke "
                         "test; writes trust_curve_quick.json only: no figure, no docs table)")
    ap.add_argument("--table-only", action="store_true",
                    help="rewrite docs/trust.md's table from trust_curve.json (in --out)")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    out_dir = Path(args.out)
    if args.table_only:
        data = json.loads((out_dir / f"{args.name}.json").read_text())
        write_doc_table(data, args.name)
        print(table(data))
        return
    if args.quick:
        args.lengths, args.seeds, args.samplers, args.resamples = [20, 40], 2, ["uniform", "spread"], 200
        args.archs = args.archs or QUICK_ARCHS
    lengths = sorted(set(args.lengths))
    if lengths[0] < 1 or args.seeds < 1:
        raise SystemExit("trust_curve.py: lengths and --seeds must be >= 1")
    scores_path = Path(args.scores or Path(tempfile.gettempdir()) / (
        f"naspipe-{args.name.replace('_', '-')}-scores" + ("-quick" if args.quick else "") + ".json"))

    from naspipe.lifecycle import kernels
    from naspipe.truth import load

    truth = load(args.truth)
    if args.archs:
        truth = truth.first(args.archs)
    ts = truth.settings
    kind = args.kernels or ts.kernels
    kernels.enter(kind)  # before the first tensor operation: every run computes under the truth's kernels

    import torch

    from naspipe.models import heldout_batches
    from naspipe.preflight.behaviour import take
    from naspipe.spaces.shared import parse_shared
    from naspipe.spaces.space import resolve_space

    torch.set_num_threads(1)
    space = resolve_space(args.space)
    if ts.space_digest != space.digest():
        raise SystemExit(f"{args.truth} is not a truth of {args.space} (space digest {ts.space_digest[:12]})")
    behaviour = take(space, kind, fresh=False)["behaviour_sha256"]
    if ts.behaviour_sha256 is not None and kind == ts.kernels and behaviour != ts.behaviour_sha256:
        raise SystemExit(f"the supernet computes otherwise than when the truth was built (behaviour "
                         f"{behaviour[:12]} vs {ts.behaviour_sha256[:12]}): build the truth again")
    seeds = list(range(args.seeds))
    for sampler in args.samplers:  # the premise of scoring one long run at every length
        for seed in seeds:
            check_prefixes(space, seed, sampler, lengths)
    archs = list(truth.archs)
    batches = heldout_batches(space)
    serial = parse_shared("serial")
    key = {"space_digest": space.digest(), "archs_sha256": hashlib.sha256(json.dumps(archs).encode()).hexdigest(),
           "optimizer": args.optimizer, "lr": args.lr, "shared_layers": str(serial), "kernels": kind}
    cache = json.loads(scores_path.read_text()) if scores_path.is_file() else {}
    if cache.get("key") != key:
        cache = {"key": key, "runs": {}}

    t_start = time.perf_counter()
    last = [t_start]
    for sampler in args.samplers:
        for seed in seeds:
            entry = cache["runs"].get(f"{sampler}|{seed}")
            if entry is not None and all(str(n) in entry["scores"] for n in lengths):
                continue
            entry = train_and_score(space, sampler, seed, lengths, archs, batches, args.optimizer, args.lr)
            now = time.perf_counter()
            cache["wall_s"] = cache.get("wall_s", 0.0) + now - last[0]  # over every sitting (the cache resumes)
            last[0] = now
            cache["runs"][f"{sampler}|{seed}"] = entry
            scores_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = scores_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(cache))
            tmp.replace(scores_path)
            print(json.dumps({"sampler": sampler, "seed": seed, "subnets": lengths[-1],
                              "train_s": round(entry["train_s"], 1), "score_s": round(entry["score_s"], 1),
                              "elapsed_s": round(now - t_start, 1)}), flush=True)

    t_stats = time.perf_counter()
    used = {s: {seed: cache["runs"][f"{s}|{seed}"] for seed in seeds} for s in args.samplers}
    data = curve(truth, used, lengths, args.resamples)
    stats_s = time.perf_counter() - t_stats
    data["config"] = {
        "truth": _rel(args.truth), "space": ts.space, "space_digest": ts.space_digest, "truth_steps": ts.steps,
        "truth_seeds": list(ts.seeds), "truth_lr": ts.lr, "architectures": len(archs), "lengths": lengths,
        "samplers": list(args.samplers), "supernet_seeds": seeds, "optimizer": args.optimizer, "lr": args.lr,
        "shared_layers": str(serial), "kernels": kind, "behaviour_sha256": behaviour,
        "heldout_samples": sum(len(b[1]) for b in batches), "resamples": args.resamples,
        "stream_prefixes_checked": True, "rule": RULE,
        "train_s": round(sum(r["train_s"] for runs in used.values() for r in runs.values()), 1),
        "score_s": round(sum(r["score_s"] for runs in used.values() for r in runs.values()), 1),
        "stats_s": round(stats_s, 1), "wall_s": round(cache.get("wall_s", 0.0) + stats_s, 1)}
    data = {"config": data.pop("config"), **data}
    write_result(f"{args.name}_quick" if args.quick else args.name, data, out_dir)
    if not args.quick and out_dir.resolve() == RESULTS.resolve():  # (a run elsewhere leaves the docs alone)
        write_figure(data, args.name)
        write_doc_table(data, args.name)
    print()
    print(table(data))


def train_and_score(space: Any, sampler: str, seed: int, lengths: list[int], archs: list[Any], batches: Any,
                    optimizer: str, lr: float) -> dict[str, Any]:
    """One reference run of ``lengths[-1]`` subnets of ``sampler`` and ``seed``, scoring every architecture of
    ``archs`` on ``batches`` after subnet ``N`` for each length ``N``: the cache's entry (scores per length, the
    training's and the scoring's seconds)."""
    import copy

    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.search.run import make_evaluator
    from naspipe.sequences.samplers import make_stream
    from naspipe.spaces.shared import parse_shared

    scored: dict[str, dict[str, list[float]]] = {}
    score_s = 0.0
    wanted = set(lengths)

    def snapshot(done: int, model: Any) -> None:
        nonlocal score_s
        if done not in wanted:
            return
        t0 = time.perf_counter()
        ev = make_evaluator(copy.deepcopy(model), batches)  # a copy: the run trains on untouched
        res = [ev(a) for a in archs]
        scored[str(done)] = {"acc": [r["accuracy"] for r in res], "loss": [r["loss"] for r in res]}
        score_s += time.perf_counter() - t0

    stream = make_stream(space, seed, lengths[-1], sampler)
    ref = train_reference(space, stream, seed, parse_shared("serial"), optimizer=optimizer, lr=lr,
                          on_subnet_done=snapshot)
    train_s = ref.wall_s - score_s
    window = {str(n): [ref.losses[j] for j in range(max(0, n - LOSS_WINDOW), n)] for n in lengths}
    return {"scores": scored, "subnets": lengths[-1], "train_s": train_s, "score_s": score_s,
            "subnets_per_s": lengths[-1] / train_s, "kernels": ref.config["kernels"],
            "train_loss": {n: sum(v) / len(v) for n, v in window.items()}}


def _rel(path: str) -> str:
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_absolute() and p.is_relative_to(ROOT) else path


def check_prefixes(space: Any, seed: int, sampler: str, lengths: list[int]) -> None:
    """AssertionError unless the first ``N`` subnets of the longest stream are the ``N``-subnet stream, for each
    length ``N``: the premise of scoring one long run at every length."""
    from naspipe.sequences.samplers import make_stream

    long = make_stream(space, seed, lengths[-1], sampler)
    first = [long[j] for j in range(lengths[-1])]
    for n in lengths[:-1]:
        short = make_stream(space, seed, n, sampler)
        if [short[j] for j in range(n)] != first[:n]:
            raise AssertionError(f"sampler {sampler}, seed {seed}: the first {n} subnets of a {lengths[-1]}-subnet "
                                 f"stream are not the {n}-subnet stream; train each length on its own")


def curve(truth: Any, runs: dict[str, dict[int, dict[str, Any]]], lengths: list[int],
          resamples: int) -> dict[str, Any]:
    """Every statistic per sampler and length (see the module), the truth's floor and the powered lengths."""
    import numpy as np

    from naspipe.ranking.stats import estimate, kendall, pairwise_tau, pick, regret, seed_floor, spearman, top_overlap

    archs = list(truth.archs)
    target = [truth.mean_accuracy(a) for a in archs]
    t = np.asarray(target)
    best = float(t.max())
    n_archs = len(t)
    floor_a = seed_floor(truth, resamples)
    samplers: dict[str, Any] = {}
    for sampler, per_seed in runs.items():
        seeds = sorted(per_seed)
        rows = []
        for n in lengths:
            acc = [np.asarray(per_seed[s]["scores"][str(n)]["acc"]) for s in seeds]
            loss = [np.asarray(per_seed[s]["scores"][str(n)]["loss"]) for s in seeds]

            def mean_of(f: Any, acc: list = acc, loss: list = loss) -> Any:
                return estimate(lambda i: float(np.mean([f(t[i].tolist(), a[i].tolist(), lo[i].tolist())
                                                         for a, lo in zip(acc, loss, strict=True)])),
                                n_archs, resamples=resamples)

            taus = [kendall(target, a) for a in acc]
            picks = [pick(a.tolist(), lo.tolist()) for a, lo in zip(acc, loss, strict=True)]
            floor_b = pairwise_tau([a.tolist() for a in acc], resamples=resamples)
            collapsed = [s for s, a in zip(seeds, acc, strict=True) if collapsed_scores(a.tolist())]
            rows.append({
                "subnets": n,
                "kendall_tau": mean_of(lambda x, y, _: kendall(x, y)).to_dict(),
                "spearman_rho": mean_of(lambda x, y, _: spearman(x, y)).to_dict(),
                "top10_overlap": mean_of(lambda x, y, z: top_overlap(x, y, est_loss=z)).to_dict(),
                "regret": mean_of(regret).to_dict(),
                "supernet_seed_vs_seed": floor_b.to_dict() if floor_b else None,
                "seed_band": max((abs(a - b) for a, b in combinations(taus, 2)), default=0.0),
                "tau_per_seed": taus,
                "spearman_per_seed": [spearman(target, a) for a in acc],
                "regret_per_seed": [best - target[p] for p in picks],
                "pick_names": [truth.names[archs[p]] for p in picks],
                "train_loss_per_seed": [per_seed[s].get("train_loss", {}).get(str(n)) for s in seeds],
                "collapsed_seeds": collapsed,
            })
        samplers[sampler] = {
            "rows": rows, "powered_length": powered_length(rows),
            "subnets_per_s": float(np.mean([per_seed[s]["subnets_per_s"] for s in seeds])),
            "run_s": float(np.mean([per_seed[s]["train_s"] + per_seed[s]["score_s"] for s in seeds]))}
    found = [v["powered_length"] for v in samplers.values()]
    overall = None if not found or any(p is None for p in found) else max(found)
    return {"floors": {"truth_seed_vs_seed": floor_a.to_dict() if floor_a else None}, "best_truth_accuracy": best,
            "samplers": samplers, "powered_length": overall}


def collapsed_scores(acc: list[float]) -> bool:
    """A supernet that scores more than half the architectures at one accuracy (a collapsed training: a network
    that predicts one class; the rule ``naspipe rank`` applies to a truth, ``compare.check_truth_ranks``)."""
    return max(acc.count(v) for v in set(acc)) > len(acc) // 2


def powered_length(rows: list[dict[str, Any]]) -> int | None:
    """The rule (``RULE``) on one sampler's rows (ascending lengths), over the lengths before the first at which
    a seed's supernet collapsed (``collapsed_scores``): None where no seed-to-seed tau was measured (one seed),
    where fewer than two lengths are left, or where only the longest of them qualifies (the plateau is not
    shown)."""
    first_collapse = next((k for k, r in enumerate(rows) if r.get("collapsed_seeds")), len(rows))
    rows = rows[:first_collapse]
    if len(rows) < 2 or any(r["supernet_seed_vs_seed"] is None for r in rows):
        return None
    ests = [r["supernet_seed_vs_seed"] for r in rows]
    if any(e["low"] is None or e["high"] is None for e in ests):
        return None

    def not_below_a_longer(k: int) -> bool:
        return all(ests[k]["high"] >= later["low"] for later in ests[k + 1:])

    first = len(rows) - 1
    while first > 0 and not_below_a_longer(first - 1):
        first -= 1
    return rows[first]["subnets"] if first < len(rows) - 1 else None


_est = estimate_text

def table(data: dict[str, Any]) -> str:
    """The markdown of ``trust_curve.json`` (what docs/trust.md shows)."""
    c = data["config"]
    n = len(c["supernet_seeds"])
    lines = [f"{c['space']} truth ({c['architectures']} architectures x {len(c['truth_seeds'])} seeds, "
             f"{c['truth_steps']} steps stand-alone); sequential reference supernets: {c['optimizer']} lr {c['lr']}, "
             f"{c['shared_layers']} shared layers, kernels {c['kernels']}, {n} seeds "
             f"({', '.join(map(str, c['supernet_seeds']))}), each length scored on one run of "
             f"{c['lengths'][-1]} subnets per sampler and seed; {c['heldout_samples']} held-out samples; intervals: "
             f"95% bootstrap over architectures ({c['resamples']} resamples) of the mean over seeds. "
             f"Benchmark wall time {c['wall_s'] / 60:.1f} min (training {c['train_s'] / 60:.1f}, scoring "
             f"{c['score_s'] / 60:.1f}, statistics {c['stats_s'] / 60:.1f}).",
             "",
             f"Truth seed vs seed (floor (a)): **{_est(data['floors']['truth_seed_vs_seed'])}**.",
             "",
             "| sampler | subnets | Kendall tau vs truth | Spearman rho | top-10% overlap | regret of the pick | "
             f"supernet seed vs seed tau | seed band | tau per seed | training loss per seed (last {LOSS_WINDOW}) "
             "| collapsed seeds |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for sampler, s in data["samplers"].items():
        for r in s["rows"]:
            mark = " **(powered)**" if r["subnets"] == s["powered_length"] else ""
            lines.append(f"| {sampler} | {r['subnets']}{mark} | {_est(r['kendall_tau'])} | {_est(r['spearman_rho'])} "
                         f"| {_est(r['top10_overlap'])} | {_est(r['regret'], 4)} | "
                         f"{_est(r['supernet_seed_vs_seed'])} | {r['seed_band']:.2f} | "
                         f"{', '.join(f'{x:.2f}' for x in r['tau_per_seed'])} | "
                         f"{', '.join('-' if x is None else f'{x:.2f}' for x in r['train_loss_per_seed'])} | "
                         f"{', '.join(map(str, r['collapsed_seeds'])) or '-'} |")
    lines += ["", f"Rule ({c['rule']}):"]
    for sampler, s in data["samplers"].items():
        p = s["powered_length"]
        gone = next((r for r in s["rows"] if r["collapsed_seeds"]), None)
        lines.append(f"- {sampler}: " + (f"powered length **{p}** subnets" if p else
                                         f"plateau not shown before {gone['subnets']} subnets" if gone else
                                         f"plateau not shown within {c['lengths'][-1]} subnets")
                     + (f"; seed {', '.join(map(str, gone['collapsed_seeds']))} collapsed by {gone['subnets']} "
                        "subnets (that length and the longer ones are left out of the rule)" if gone else "")
                     + f" (training {s['subnets_per_s']:.0f} subnets/s; one run with scoring {s['run_s']:.0f} s)")
    p = data["powered_length"]
    missing = [k for k, s in data["samplers"].items() if s["powered_length"] is None]
    lines.append("")
    lines.append(f"**Powered length: {p} subnets** (the largest of the samplers')." if p else
                 f"**Powered length: not shown within {c['lengths'][-1]} subnets** ({', '.join(missing)} not "
                 "shown to plateau).")
    return "\n".join(lines)


def write_doc_table(data: dict[str, Any], name: str = NAME) -> None:
    """Replace the block between the markers of docs/trust.md (appended at the end when there is none)."""
    replace_marked(DOC, *markers(name), table(data))


def write_figure(data: dict[str, Any], name: str = NAME) -> None:
    """docs/figures/NAME.html: ``naspipe.viz.trust.length_curve_figure`` of the result (notebook 09 draws the same)."""
    from naspipe.viz.trust import length_curve_figure

    path = figure_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    length_curve_figure(data).update_layout(width=1300).write_html(path, include_plotlyjs="cdn")


if __name__ == "__main__":
    main()
