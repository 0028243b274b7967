"""Issue 42 item 4: which ranking method closes the weight-sharing gap, against the stand-alone truth, at equal cost?

Why it exists: the powered tables (``benchmarks/trust.py --name trust_powered_*``) say how well ONE one-shot supernet
ranks a truth's architectures and how much a change of seed alone moves that. This benchmark puts the cheaper and
the dearer ways of ranking beside it, on the same truth, at the same powered length (the ``config`` of the shipped
powered table: optimizer, learning rate, ``serial`` shared layers, subnets N), each with five seeds, so a
difference is called only where it clears the one-shot seed band. Rows (methods):

- ``one-shot``: the sequential reference (``naspipe.oracle.sequential_trainer.train_reference``) on N subnets of the
  default sampler (``naspipe.sequences.samplers.DEFAULT_SAMPLER``, recorded), scored with ``make_evaluator``;
- ``few-shot:BLOCK (W=N/2)`` for every choice block (and ``W=N/4`` with ``--quarter-warmup``): the same N subnets
  (the warm-up counted) on the expanded space (``naspipe.spaces.few_shot``), each architecture scored on its own
  sub-supernet (``naspipe.models.sub_supernets.SubSupernets``);
- ``ensemble of 2 seeds (N/2 each)``: for row seed s, the mean accuracy and loss per architecture of the one-shot
  supernets of seeds s and s+100 after N/2 subnets each (equal total subnets);
- ``ensemble of 5 seeds (N each)``: the mean over seeds s, s+100, ..., s+400 after N subnets each (5x the subnets);
- ``ensemble of last 3 (N, 7N/8, 3N/4)``: for row seed s, the mean accuracy and loss per architecture of the one-shot
  run's own supernets after N, N - N/8 and N - 2N/8 subnets (``last_positions``: three snapshots through the last
  quarter, what ``naspipe rank --ensemble-last 3`` averages of a run trained with ``--checkpoint-every N/8
  --keep-checkpoints 2``): the same run of N subnets, so no extra training;
- ``proxy:synflow``, ``proxy:gradnorm``, ``proxy:params`` at initialisation (``naspipe.ranking.proxies``; no
  training, the row's seeds are the proxies' initialisation seeds).

One run of N subnets gives the N/2 supernet too: the reference trains subnet j on batch j of its seed at one
learning rate and the first N/2 subnets of a seeded fair stream do not depend on its length (checked before any
training, as ``benchmarks/trust_curve.py`` does), so the supernet ``on_subnet_done`` sees after N/2 subnets is,
bit for bit, a run of N/2.

Per row, each over the seeds with a 95% bootstrap interval over architectures (``naspipe.ranking.stats``; the
statistic being the mean over seeds, as trust.py aggregates): Kendall tau, Spearman rho, top-10% overlap, regret of
the pick; the per-seed taus and regrets; the row's seed band (largest |tau_i - tau_j|); the paired difference of tau
against one-shot (seed s against one-shot seed s) with its interval and ``verdict`` against the ONE-SHOT seed band;
how many seeds reach regret <= 0.01. The goal (issue 42): a method at mean tau >= 0.62 with regret <= 0.01 on at least
4 of 5 seeds, at no more total subnets than one-shot.

Runtime side (``--runtime-subnets``, digits-truth): one-shot against few-shot subnets/s on a real 2-stage csp pipeline
(``naspipe.runtime.train``), same subnets, each run verified bit-identical to its sequential reference
(``naspipe.runfolder.results.verify``), alternating repeats.

Run (each truth under its own ``--name``: its JSON, its scores cache in the temp dir, its table in docs/trust.md)::

    nice -n 5 .venv/bin/python benchmarks/ranking_methods.py --quarter-warmup
    nice -n 5 .venv/bin/python benchmarks/ranking_methods.py --name ranking_methods_mnist1d \
        --truth data/truth/mnist1d-truth --space data/spaces/mnist1d-truth.json --runtime-subnets 0

``--quick``: 24 architectures, 12 subnets, 2 seeds, one held-out batch, a 12-subnet runtime check; writes only
NAME_quick.json.
``--table-only``: rewrite the docs table from the JSON.
``--rows ensemble-last``: compute only that row and merge it into the existing NAME.json (and its docs table), its
other rows, floors and runtime kept: trains the one-shot runs of the row seeds again (not the ensemble members, the
few-shot runs or the proxies), and refuses to merge unless they score exactly as NAME.json records (the same
one-shot tau per seed), so the row is compared with the one-shot supernets of the table. Give the options of the
run that wrote NAME.json (``--truth``, ``--space``, ``--name``; ``--quick`` merges into NAME_quick.json)::

    nice -n 5 .venv/bin/python benchmarks/ranking_methods.py --rows ensemble-last
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, estimate_text, replace_marked, table_markers, write_result

DOC = ROOT / "docs" / "trust.md"
PROXIES = ("synflow", "gradnorm", "params")
ENSEMBLE_STRIDE = 100  # the ensemble members of row seed s: seeds s, s+100, s+200, ...
LAST_K = 3  # the ensemble of the last supernets of one run: after N, N - N/8, N - 2N/8 subnets
LAST_LABEL = f"ensemble of last {LAST_K} (N, 7N/8, 3N/4)"
ROWS = ("ensemble-last",)  # what --rows computes alone and merges into an existing NAME.json
GOAL = {"tau": 0.62, "regret": 0.01, "seeds": 4}
LOAD_NOTE = ("measured on 2 cores shared with another benchmark running at the same time: wall times and subnets/s "
             "are inflated and noisy; the rankings are not affected (every run is deterministic)")


def markers(name: str) -> tuple[str, str]:
    """The markers of ``name``'s table in docs/trust.md."""
    return table_markers("ranking_methods", name)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def last_positions(n: int) -> list[int]:
    """The subnets after which the one-shot run's supernets are averaged by the ensemble-of-last row: ``N``, then
    ``LAST_K - 1`` more, ``N/8`` apart (at least 1), newest first."""
    step = max(1, n // 8)
    return [n - k * step for k in range(LAST_K)]


def _powered_config(truth: str) -> tuple[str, dict[str, Any]]:
    """The shipped powered table of ``truth`` (its name and ``config``): the settings every supernet here uses."""
    name = "trust_powered_mnist1d_2stages" if "mnist1d" in Path(truth).name else "trust_powered_2stages"
    return name, json.loads((RESULTS / f"{name}.json").read_text())["config"]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", default=str(ROOT / "data" / "truth" / "digits-truth"))
    ap.add_argument("--space", default=str(ROOT / "data" / "spaces" / "digits-truth.json"))
    ap.add_argument("--seeds", type=int, default=5, help="row seeds 0..S-1 (default %(default)s)")
    ap.add_argument("--subnets", type=int, default=None, help="N (default: the shipped powered table's)")
    ap.add_argument("--quarter-warmup", action="store_true", help="also few-shot with W = N/4 on every block")
    ap.add_argument("--runtime-subnets", type=int, default=300, help="subnets of each pipeline run of the runtime "
                    "comparison (0: none; default %(default)s)")
    ap.add_argument("--runtime-repeats", type=int, default=3)
    ap.add_argument("--name", default="ranking_methods")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--scores", default=None, help="scores cache (default: NAME-scores.json in the temp dir); an "
                    "interrupted run resumes from it")
    ap.add_argument("--archs", type=int, default=None, help="the truth's first N architectures only")
    ap.add_argument("--heldout", type=int, default=None, help="held-out batches that score an architecture (default: "
                    "all; --quick: 1)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default %(default)s)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 24 architectures, 12 subnets, 2 seeds")
    ap.add_argument("--table-only", action="store_true", help="rewrite the docs table from NAME.json")
    ap.add_argument("--rows", choices=ROWS, default=None, help="compute only this row and merge it into the "
                    "existing NAME.json and its docs table (the one-shot runs of the row seeds are trained again "
                    "and must score as NAME.json records)")
    args = ap.parse_args(argv)
    if args.table_only:
        data = json.loads((args.out / f"{args.name}.json").read_text())
        replace_marked(DOC, *markers(args.name), table(data))
        print(table(data))
        return
    if args.scores is None:
        args.scores = str(Path(tempfile.gettempdir()) / f"naspipe-{args.name}-scores.json")
    powered_name, powered = _powered_config(args.truth)
    if args.quick:
        args.subnets, args.seeds, args.archs, args.resamples = 12, 2, args.archs or 24, 100
        args.heldout = args.heldout or 1
        args.runtime_subnets, args.runtime_repeats = min(args.runtime_subnets, 12), 1
        args.scores = args.scores.replace(".json", "-quick.json")
        args.name = f"{args.name}_quick"
    n = args.subnets or int(powered["subnets"])
    optimizer, lr = str(powered["optimizer"]), float(powered["lr"])

    import numpy as np
    import torch

    from naspipe.models import heldout_batches
    from naspipe.sequences.samplers import DEFAULT_SAMPLER, make_stream
    from naspipe.spaces.space import resolve_space
    from naspipe.truth import load

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    space = resolve_space(args.space)
    truth = load(args.truth)
    if args.archs:
        truth = truth.first(args.archs)
    if truth.settings.space_digest != space.digest():
        raise SystemExit(f"{args.truth} is not a truth of {args.space}")
    archs = list(truth.archs)
    batches = heldout_batches(space, args.heldout)
    blocks = [space.blocks[i].name for i in space.choice_blocks if space.blocks[i].k > 1]
    warmups = {"N/2": n // 2, **({"N/4": n // 4} if args.quarter_warmup else {})}
    seeds = list(range(args.seeds))
    members = [s + ENSEMBLE_STRIDE * k for s in seeds for k in range(5)]
    for s in members:  # the premise of scoring the N/2 supernet inside the run of N
        if list(make_stream(space, s, n // 2, DEFAULT_SAMPLER)) != list(make_stream(space, s, n, DEFAULT_SAMPLER))[
                : n // 2]:
            raise SystemExit(f"the {DEFAULT_SAMPLER} stream of seed {s}: its first {n // 2} subnets depend on its "
                             "length; the N/2 ensemble cannot be read off the run of N")

    key = {"space_digest": space.digest(), "subnets": n, "optimizer": optimizer, "lr": lr, "archs": args.archs,
           "sampler": DEFAULT_SAMPLER, "shared_layers": "serial", **({"heldout": args.heldout} if args.heldout else {})}
    cache_path = Path(args.scores)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    if cache.get("key") != key:
        cache = {"key": key, "runs": {}}
    last = [t_start]

    def keep(label: str, entry: dict[str, Any] | None) -> None:
        now = time.perf_counter()
        cache["wall_s"] = cache.get("wall_s", 0.0) + now - last[0]  # over every sitting (the cache resumes)
        last[0] = now
        if entry is not None:
            cache["runs"][label] = entry
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(cache_path)
        print(json.dumps({"run": label, "elapsed_s": round(now - t_start, 1)}), flush=True)

    def score(model: Any) -> dict[str, list[float]]:
        from naspipe.search.run import make_evaluator

        ev = make_evaluator(model, batches)
        res = [ev(a) for a in archs]
        return {"acc": [r["accuracy"] for r in res], "loss": [r["loss"] for r in res]}

    positions = last_positions(n)
    for s in sorted(set(seeds if args.rows else members)):  # (the row seeds' runs also keep the last supernets)
        label = f"one-shot|{s}"
        if label not in cache["runs"] or (s in seeds and "last" not in cache["runs"][label]):
            keep(label, one_shot(space, s, n, optimizer, lr, DEFAULT_SAMPLER, score,
                                 last=positions[1:] if s in seeds else ()))
    runs = cache["runs"]
    t = np.asarray([truth.mean_accuracy(a) for a in archs])
    best = float(t.max())
    last_how = (f"mean of the one-shot run's supernets after {', '.join(map(str, positions))} subnets (no extra "
                "training)")
    ens_last = {s: _mean_scores([runs[f"one-shot|{s}"]["full"], *(runs[f"one-shot|{s}"]["last"][str(p)]
                                                                   for p in positions[1:])]) for s in seeds}
    if args.rows:
        merge_rows(args, [(LAST_LABEL, last_how, n, ens_last)], {s: runs[f"one-shot|{s}"]["full"] for s in seeds},
                   t, seeds, archs, truth, best, n, positions, time.perf_counter() - t_start)
        return
    for s in seeds:
        for block in blocks:
            for wname, w in warmups.items():
                label = f"few-shot:{block}:{wname}|{s}"
                if label not in cache["runs"]:
                    keep(label, few_shot(space, s, n, w, block, optimizer, lr, DEFAULT_SAMPLER, score))
        for kind in PROXIES:
            if f"proxy:{kind}|{s}" not in cache["runs"]:
                from naspipe.ranking.proxies import score_archs

                t0 = time.perf_counter()
                keep(f"proxy:{kind}|{s}", {"acc": score_archs(space, archs, kind, s), "loss": None,
                                           "wall_s": time.perf_counter() - t0})
    runtime = None
    if args.runtime_subnets:
        if "runtime" not in cache or cache["runtime"].get("subnets") != args.runtime_subnets or len(
                cache["runtime"]["repeats"]) < args.runtime_repeats:
            runtime = runtime_check(space, args.runtime_subnets, args.runtime_repeats, blocks[0], optimizer, lr)
            cache["runtime"] = runtime
            keep("runtime", None)
        runtime = cache["runtime"]

    # ---- the rows
    ens2 = {s: _mean_scores([runs[f"one-shot|{s + ENSEMBLE_STRIDE * k}"]["half"] for k in range(2)]) for s in seeds}
    ens5 = {s: _mean_scores([runs[f"one-shot|{s + ENSEMBLE_STRIDE * k}"]["full"] for k in range(5)]) for s in seeds}
    methods: list[tuple[str, str, int, dict[int, dict[str, Any]]]] = [
        ("one-shot", "one-shot supernet", n, {s: runs[f"one-shot|{s}"]["full"] for s in seeds})]
    for wname, w in warmups.items():
        for block in blocks:
            methods.append((f"few-shot:{block} (W={wname})", f"few-shot split on {block}, warm-up {w} of {n}", n,
                            {s: runs[f"few-shot:{block}:{wname}|{s}"] for s in seeds}))
    methods.append(("ensemble of 2 seeds (N/2 each)", f"mean of seeds s, s+{ENSEMBLE_STRIDE} after {n // 2} "
                    "subnets each", n, ens2))
    methods.append(("ensemble of 5 seeds (N each, 5x the subnets)", f"mean of seeds s, s+{ENSEMBLE_STRIDE}, ..., "
                    f"s+{4 * ENSEMBLE_STRIDE} after {n} subnets each", 5 * n, ens5))
    methods.append((LAST_LABEL, last_how, n, ens_last))
    for kind in PROXIES:
        methods.append((f"proxy:{kind}", f"{kind} at initialisation (seed s), no training", 0,
                        {s: runs[f"proxy:{kind}|{s}"] for s in seeds}))

    from naspipe.ranking.stats import kendall, pairwise_tau, seed_floor

    base = methods[0][3]
    base_taus = [kendall(t, base[s]["acc"]) for s in seeds]
    band = max((abs(a - b) for a, b in combinations(base_taus, 2)), default=0.0)
    rows = [row(label, how, cost, per, base, t, seeds, band, args.resamples, archs, truth.names, best)
            for label, how, cost, per in methods]
    floor_a = seed_floor(truth, resamples=args.resamples)
    floor_b = pairwise_tau([base[s]["acc"] for s in seeds], resamples=args.resamples)
    data = {
        "config": {"truth": _rel(args.truth), "space": truth.settings.space, "space_digest": space.digest(),
                   "truth_steps": truth.settings.steps, "truth_seeds": list(truth.settings.seeds),
                   "architectures": len(archs), "subnets": n, "settings_from": f"benchmarks/results/{powered_name}"
                   ".json config", "optimizer": optimizer, "lr": lr, "shared_layers": "serial",
                   "sampler": DEFAULT_SAMPLER, "trainer": "naspipe.oracle.sequential_trainer.train_reference "
                   "(in-process)", "seeds": seeds, "ensemble_stride": ENSEMBLE_STRIDE,
                   "few_shot_blocks": blocks, "few_shot_warmups": warmups,
                   "ensemble_last": {"supernets": LAST_K, "after_subnets": positions}, "resamples": args.resamples,
                   "heldout_samples": sum(len(b[1]) for b in batches), "best_truth_accuracy": best,
                   "wall_s": round(cache.get("wall_s", 0.0), 1), "machine_load": LOAD_NOTE,
                   "goal": {**GOAL, "rule": "mean tau >= 0.62 and regret <= 0.01 on at least 4 of 5 seeds, at no "
                            "more total subnets per seed than one-shot"}},
        "floors": {"truth_seed_vs_seed": floor_a.to_dict() if floor_a else None,
                   "one_shot_seed_vs_seed": floor_b.to_dict() if floor_b else None,
                   "one_shot_tau_per_seed": base_taus, "one_shot_seed_band": band},
        "goal": goal(rows, n, t, best, truth, archs),
        "rows": rows,
        "runtime": runtime,
        "scatter": {"seed": seeds[0], "truth_accuracy": t.tolist(), "names": [truth.names[a] for a in archs],
                    "scores": {label: [round(x, 6) for x in per[seeds[0]]["acc"]] for label, _, _, per in methods}},
    }
    write_result(args.name, data, args.out)
    if not args.quick and args.out.resolve() == RESULTS.resolve():
        replace_marked(DOC, *markers(args.name), table(data))
    print()
    print(table(data))


def goal(rows: list[dict[str, Any]], n: int, t: Any, best: float, truth: Any, archs: list[Any]) -> dict[str, Any]:
    """Which rows meet the goal, and the best tau and the best regret among the rows of one-shot's cost or less."""
    cheap = [r for r in rows if r["total_subnets_per_seed"] <= n]
    by_tau = max(cheap, key=lambda r: r["kendall_tau"]["value"])
    by_regret = min(cheap, key=lambda r: (-r["seeds_regret_le_goal"], r["regret"]["value"]))
    # what a regret of 0.01 asks: how few architectures are that close to the best, and how often one stand-alone
    # seed of the truth itself picks one of them (in-sample: that seed is part of the mean)
    near = int(sum(t >= best - GOAL["regret"] - 1e-12))
    truth_picks = [best - truth.mean_accuracy(max(archs, key=lambda a, k=k: truth.accuracy[a][k]))
                   for k in range(len(truth.settings.seeds))]
    return {"met_by": [r["method"] for r in rows if r["goal_met"] and r["total_subnets_per_seed"] <= n],
            "best_tau_at_equal_cost": {"method": by_tau["method"], "kendall_tau": by_tau["kendall_tau"],
                                       "regret": by_tau["regret"]["value"],
                                       "seeds_regret_le_goal": by_tau["seeds_regret_le_goal"]},
            "best_regret_at_equal_cost": {"method": by_regret["method"], "kendall_tau": by_regret["kendall_tau"],
                                          "regret": by_regret["regret"]["value"],
                                          "seeds_regret_le_goal": by_regret["seeds_regret_le_goal"]},
            "architectures_within_goal_regret": near,
            "truth_single_seed_pick_regret": truth_picks}


def merge_rows(args: Any, methods: list[tuple[str, str, int, dict[int, dict[str, Any]]]],
               base: dict[int, dict[str, Any]], t: Any, seeds: list[int], archs: list[Any], truth: Any, best: float,
               n: int, positions: list[int], wall_s: float) -> None:
    """``--rows``: ``methods``' rows computed alone, merged into the existing ``NAME.json`` (a row of the same
    method replaced, a new one placed before the proxies), its goal summary recomputed, its docs table rewritten. The
    one-shot supernets ``base`` were trained again: refused (SystemExit) unless the JSON was of the same settings and
    they rank exactly as it records, so each new row's difference against one-shot is against the table's."""
    from naspipe.ranking.stats import kendall

    path = args.out / f"{args.name}.json"
    if not path.is_file():
        raise SystemExit(f"--rows merges into {path}, which does not exist: run the benchmark without --rows first")
    data = json.loads(path.read_text())
    c = data["config"]
    ours = {"space_digest": truth.settings.space_digest, "subnets": n, "seeds": seeds, "architectures": len(archs),
            "resamples": args.resamples}
    if differ := [k for k, v in ours.items() if c.get(k) != v]:
        what = ", ".join(f"{k} {c.get(k)!r} vs {ours[k]!r}" for k in differ)
        raise SystemExit(f"--rows: {path} was written with other settings ({what}); give the options of that run")
    taus = [kendall(t, base[s]["acc"]) for s in seeds]
    if taus != data["floors"]["one_shot_tau_per_seed"]:
        raise SystemExit(f"--rows: the one-shot supernets trained again rank at tau {taus}, {path} records "
                         f"{data['floors']['one_shot_tau_per_seed']} (another machine's kernels, or other settings "
                         "such as --heldout): run the whole benchmark instead")
    band = data["floors"]["one_shot_seed_band"]
    rows = data["rows"]
    for label, how, cost, per in methods:
        new = row(label, how, cost, per, base, t, seeds, band, args.resamples, archs, truth.names, best)
        at = next((i for i, r in enumerate(rows) if r["method"] == label), None)
        if at is not None:
            rows[at] = new
        else:
            rows.insert(next((i for i, r in enumerate(rows) if r["method"].startswith("proxy:")), len(rows)), new)
        data["scatter"]["scores"][label] = [round(x, 6) for x in per[seeds[0]]["acc"]]
    scores = data["scatter"]["scores"]  # in the rows' order, as a whole run writes them
    data["scatter"]["scores"] = {r["method"]: scores[r["method"]] for r in rows if r["method"] in scores}
    data["goal"] = goal(rows, n, t, best, truth, archs)
    c["ensemble_last"] = {"supernets": LAST_K, "after_subnets": positions,
                          "merged_by": f"--rows {args.rows}", "merge_wall_s": round(wall_s, 1)}
    data.pop("benchmark", None)
    env = data.pop("environment", None)
    c.setdefault("environment_before_merge", env)
    write_result(args.name, data, args.out)
    if not args.quick and args.out.resolve() == RESULTS.resolve():
        replace_marked(DOC, *markers(args.name), table(data))
    print()
    print(table(data))


def _mean_scores(members: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """The mean accuracy and loss per architecture over ``members`` (``ensemble.mean_scored``'s rule)."""
    k = len(members)
    return {key: [sum(col) / k for col in zip(*(m[key] for m in members), strict=True)] for key in ("acc", "loss")}


def one_shot(space: Any, seed: int, n: int, optimizer: str, lr: float, sampler: str,
             score: Callable[[Any], dict[str, list[float]]], last: Sequence[int] = ()) -> dict[str, Any]:
    """One reference run of ``n`` subnets, scored after ``n // 2`` (``half``), after ``n`` (``full``) and after each
    of ``last`` (``last``: {subnets: scores})."""
    import copy

    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.sequences.samplers import make_stream
    from naspipe.spaces.shared import parse_shared

    out: dict[str, Any] = {"last": {}} if last else {}
    score_s = [0.0]

    def snapshot(done: int, model: Any) -> None:
        if done in (n // 2, n, *last):
            t0 = time.perf_counter()
            scores = score(copy.deepcopy(model))
            if done == n // 2:
                out["half"] = scores
            if done == n:
                out["full"] = scores
            if done in last:
                out["last"][str(done)] = scores
            score_s[0] += time.perf_counter() - t0

    ref = train_reference(space, make_stream(space, seed, n, sampler), seed, parse_shared("serial"),
                          optimizer=optimizer, lr=lr, on_subnet_done=snapshot)
    return {**out, "train_s": ref.wall_s - score_s[0], "subnets_per_s": n / (ref.wall_s - score_s[0])}


def few_shot(space: Any, seed: int, n: int, warmup: int, block: str, optimizer: str, lr: float, sampler: str,
             score: Callable[[Any], dict[str, list[float]]]) -> dict[str, Any]:
    """One few-shot reference run (split on ``block`` after ``warmup`` of ``n`` subnets), each architecture scored
    on its own sub-supernet."""
    from naspipe.models.sub_supernets import SubSupernets
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.sequences.samplers import make_stream
    from naspipe.sequences.sequence import ReplayStream
    from naspipe.spaces.few_shot import few_shot_space
    from naspipe.spaces.shared import parse_shared

    fs = few_shot_space(space, block, warmup, n)
    base = make_stream(space, seed, n, sampler)
    stream = ReplayStream(fs, [fs.expand(j, base[j]) for j in range(n)], valid=True)
    ref = train_reference(fs, stream, seed, parse_shared("serial"), optimizer=optimizer, lr=lr)
    return {**score(SubSupernets(ref.model)), "train_s": ref.wall_s, "subnets_per_s": n / ref.wall_s}


def runtime_check(space: Any, subnets: int, repeats: int, block: str, optimizer: str, lr: float) -> dict[str, Any]:
    """One-shot against few-shot (split on ``block``, W = subnets/2) on a 2-stage csp pipeline, ``repeats``
    alternating repeats of the same subnets, each verified against its sequential reference."""
    import os

    import naspipe
    from naspipe.runfolder.results import verify
    from naspipe.runtime import TrainConfig, train

    root = Path(tempfile.mkdtemp(prefix="naspipe-ranking-methods-"))
    variants = {"one-shot": {}, f"few-shot:{block}": {"few_shot": block, "few_shot_warmup": subnets // 2}}
    common = {"subnets": subnets, "seed": 0, "shared_layers": "serial", "optimizer": optimizer, "lr": lr}
    rates: dict[str, list[float]] = {v: [] for v in variants}
    identical: dict[str, list[bool]] = {v: [] for v in variants}
    try:
        refs = {}
        for v, opts in variants.items():
            refs[v] = root / f"ref_{len(refs)}"
            naspipe.reference(space, refs[v], progress=False, overwrite=True, **common, **opts)
        for _ in range(repeats):
            for v, opts in variants.items():
                out = root / "run"
                cfg = TrainConfig.create(space, out, stages=2, policy="csp", progress=False, overwrite=True,
                                         timeout=600, **common, **opts)
                result = train(cfg)
                same, _ = verify(out, refs[v])
                rates[v].append(float(result.metrics["subnets_per_s"]))
                identical[v].append(bool(same))
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    one, few = (_mean(rates[v]) for v in variants)
    return {"subnets": subnets, "stages": 2, "policy": "csp", "split": block, "warmup": subnets // 2,
            "repeats": [{v: rates[v][i] for v in variants} for i in range(repeats)],
            "subnets_per_s": {v: _mean(rates[v]) for v in variants}, "ratio_few_over_one": few / one,
            "identical_to_reference": identical, "cpu": _cpu(), "load_average_1m": round(os.getloadavg()[0], 2),
            "note": LOAD_NOTE}


def _cpu() -> str | None:
    import subprocess

    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), None)


def row(label: str, how: str, cost: int, per: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]],
        t: Any, seeds: list[int], band: float, resamples: int, archs: list[Any], names: dict[Any, str],
        best: float) -> dict[str, Any]:
    """One method's row: each statistic the mean over seeds with its bootstrap interval over architectures."""
    import numpy as np

    from naspipe.ranking.stats import Estimate, estimate, kendall, pick, regret, spearman, top_overlap, verdict

    est = [np.asarray(per[s]["acc"], dtype=float) for s in seeds]
    loss = [np.asarray(per[s]["loss"] if per[s].get("loss") else np.zeros(len(t)), dtype=float) for s in seeds]
    ref = [np.asarray(base[s]["acc"], dtype=float) for s in seeds]

    def over_seeds(f: Callable[[np.ndarray, np.ndarray, np.ndarray], float]) -> Estimate:
        return estimate(lambda i: float(np.mean([f(t[i], e[i], lo[i]) for e, lo in zip(est, loss, strict=True)])),
                        len(t), resamples=resamples)

    tau = over_seeds(lambda a, b, _: kendall(a, b))
    rho = over_seeds(lambda a, b, _: spearman(a, b))
    top = over_seeds(lambda a, b, c: top_overlap(a.tolist(), b.tolist(), est_loss=c.tolist()))
    reg = over_seeds(lambda a, b, c: regret(a.tolist(), b.tolist(), c.tolist()))
    taus = [kendall(t, e) for e in est]
    regrets = [best - float(t[pick(e.tolist(), lo.tolist())]) for e, lo in zip(est, loss, strict=True)]
    picks = [pick(e.tolist(), lo.tolist()) for e, lo in zip(est, loss, strict=True)]
    is_base = label == "one-shot"
    diff = None if is_base else estimate(
        lambda i: float(np.mean([kendall(t[i], e[i]) - kendall(t[i], r[i]) for e, r in zip(est, ref, strict=True)])),
        len(t), resamples=resamples)
    ok = sum(r <= GOAL["regret"] + 1e-12 for r in regrets)
    return {
        "method": label, "how": how, "total_subnets_per_seed": cost,
        "kendall_tau": tau.to_dict(), "tau_per_seed": taus,
        "seed_band": max((abs(a - b) for a, b in combinations(taus, 2)), default=0.0),
        "spearman_rho": rho.to_dict(), "top10_overlap": top.to_dict(), "regret": reg.to_dict(),
        "regret_per_seed": regrets, "pick_names": [names[archs[p]] for p in picks],
        "seeds_regret_le_goal": ok,
        "seeds_tau_and_regret_goal": sum(a >= GOAL["tau"] and r <= GOAL["regret"] + 1e-12
                                         for a, r in zip(taus, regrets, strict=True)),
        "tau_difference_vs_one_shot": None if diff is None else diff.to_dict(),
        "verdict": None if diff is None else verdict(diff, band),
        "goal_met": tau.value >= GOAL["tau"] and ok >= min(GOAL["seeds"], len(seeds)),
    }


def _rel(path: str) -> str:
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_absolute() and p.is_relative_to(ROOT) else path


def _best(b: dict[str, Any], seeds: int) -> str:
    e = b["kendall_tau"]
    return (f"{b['method']} (tau {e['value']:.2f} [{e['low']:.2f}, {e['high']:.2f}], mean regret {b['regret']:.3f}, "
            f"regret <= 0.01 on {b['seeds_regret_le_goal']}/{seeds} seeds)")


def table(data: dict[str, Any]) -> str:
    """The markdown table of NAME.json (what docs/trust.md shows)."""
    c, f, g, rt = data["config"], data["floors"], data["goal"], data.get("runtime")

    def est(e: dict[str, float | None] | None, d: int = 2) -> str:
        return estimate_text(e, d, missing="-")  # (a bound that is None, a column tying every architecture: n/a)

    k = len(c["seeds"])
    ws = ", ".join(f"{w}={v}" for w, v in c["few_shot_warmups"].items())
    if (el := c.get("ensemble_last")) is not None:  # (a table from before that row does not name it)
        merged = (f" (its row added to the table's runs by `{el['merged_by']}`, {el['merge_wall_s'] / 60:.1f} min)"
                  if el.get("merged_by") else "")
        ws += (f"; ensemble of last {el['supernets']}: the one-shot run's supernets after "
               f"{', '.join(map(str, el['after_subnets']))} subnets{merged}")
    lines = [f"{c['space']} truth ({c['architectures']} architectures x {len(c['truth_seeds'])} seeds, "
             f"{c['truth_steps']} steps stand-alone); every supernet: N = {c['subnets']} subnets (warm-up counted), "
             f"{c['optimizer']} lr {c['lr']}, shared layers {c['shared_layers']} (the settings of "
             f"`{c['settings_from']}`), sampler {c['sampler']}, the sequential reference in-process; few-shot "
             f"warm-up {ws}; {k} seeds ({', '.join(map(str, c['seeds']))}); {c['heldout_samples']} held-out samples. "
             f"Wall time of the training and scoring {c['wall_s'] / 60:.1f} min ({c['machine_load']}).",
             "",
             f"Floors (Kendall tau): truth seed vs seed **{est(f['truth_seed_vs_seed'])}**; one-shot seed vs seed "
             f"**{est(f['one_shot_seed_vs_seed'])}**; one-shot tau per seed "
             f"{', '.join(f'{x:.2f}' for x in f['one_shot_tau_per_seed'])} (one-shot seed band "
             f"+-{f['one_shot_seed_band']:.2f}: a verdict calls a difference only outside it).",
             "",
             f"Goal (issue 42, {c['goal']['rule']}): "
             + (f"**met by {', '.join(g['met_by'])}**." if g["met_by"] else "**not met** by any method.")
             + f" At one-shot's cost or less, the best tau: {_best(g['best_tau_at_equal_cost'], k)}; the best "
             f"regret: {_best(g['best_regret_at_equal_cost'], k)}. Only {g['architectures_within_goal_regret']} of "
             f"{c['architectures']} architectures are within {c['goal']['regret']} of the best stand-alone accuracy;"
             f" the pick of one stand-alone truth seed alone has regret "
             f"{', '.join(f'{x:.3f}' for x in g['truth_single_seed_pick_regret'])} (in-sample).",
             "",
             f"| method | total subnets per seed | Kendall tau, mean of {k} seeds [95%] | per seed | seed band | "
             f"Spearman rho [95%] | top-10% overlap [95%] | regret of the pick [95%]; per seed | seeds with regret "
             f"<= {c['goal']['regret']} | tau - one-shot's [95%] | verdict |",
             "|---|---:|---:|---|---:|---:|---:|---|:---:|---:|---|"]
    for r in data["rows"]:
        lines.append(
            f"| {r['method']} | {r['total_subnets_per_seed']} | {est(r['kendall_tau'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['tau_per_seed'])} | {r['seed_band']:.2f} | {est(r['spearman_rho'])} | "
            f"{est(r['top10_overlap'])} | {est(r['regret'], 3)}; {', '.join(f'{x:.3f}' for x in r['regret_per_seed'])}"
            f" | {r['seeds_regret_le_goal']}/{k} | {est(r['tau_difference_vs_one_shot'])} | {r['verdict'] or '-'} |")
    if rt:
        ident = all(all(v) for v in rt["identical_to_reference"].values())
        (one, few) = rt["subnets_per_s"].values()
        lines += ["", f"Runtime ({rt['subnets']} subnets, {rt['stages']} stages, {rt['policy']}, few-shot split on "
                  f"{rt['split']} with W={rt['warmup']}, {len(rt['repeats'])} alternating repeats, CPU "
                  f"{rt['cpu']}, load average {rt['load_average_1m']}): one-shot {one:.1f} subnets/s, few-shot "
                  f"{few:.1f} subnets/s, ratio few/one **{rt['ratio_few_over_one']:.2f}**; every run bit-identical "
                  f"to its sequential reference: {'yes' if ident else 'NO'}. Loaded machine: see above."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
