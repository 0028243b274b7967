"""Issue 24, search quality: do fair or spread sequences rank architectures better or worse than uniform?

Why it exists: a sampler that pipelines better is only worth using if the supernet it trains still ranks
architectures as well. This part of ``benchmarks/samplers.py`` (``--part quality``) trains reference supernets
of a ground truth's space with each sampler and several seeds at equal subnet counts, scores each with
``naspipe.rank`` (issue 23) and compares the samplers with intervals that include the seed noise.

Everything about the truth is read from its folder (its space file or preset name, optimizer, learning rate,
shared-layer mode), so another truth is one argument (``truth``).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESAMPLES = 1000
SAMPLERS = ("uniform", "fair", "spread")


def reference_args(truth: Path) -> list[str]:
    """The ``naspipe reference`` options that train a supernet comparable with ``truth``: its space, optimizer,
    learning rate and shared-layer mode."""
    settings = json.loads((truth / "truth-settings.json").read_text())
    space = truth / "space.json"
    return ["--space", str(space) if space.is_file() else settings["space"], "--optimizer", settings["optimizer"],
            "--lr", str(settings["lr"]), "--shared-layers", settings["shared_layers"]]


def joint_bootstrap(stat: Callable[[np.ndarray, np.ndarray], float], n_archs: int, n_seeds: int,
                    seed: int = 0, resamples: int = RESAMPLES) -> tuple[float, float]:
    """95% percentile interval of ``stat(arch_idx, seed_idx)`` resampling architectures and seeds together
    (both with replacement, ``resamples`` times), so the interval holds the architecture sampling and the seed
    noise."""
    rng = np.random.default_rng(seed)
    values = [stat(rng.integers(0, n_archs, n_archs), rng.integers(0, n_seeds, n_seeds)) for _ in range(resamples)]
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def _per_seed(runs: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [r[key]["value"] for r in runs]


def compare(target: Sequence[float], base: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]],
            resamples: int = RESAMPLES) -> dict[str, Any]:
    """``other`` against ``base`` (same seeds, in order): mean over seeds of the paired difference of tau
    against the truth and of the regret, each with its joint (architectures x seeds) interval and verdict."""
    from naspipe.ranking.stats import kendall, regret

    t = np.asarray(target, dtype=float)
    acc = {name: [np.asarray(r["accuracy"], dtype=float) for r in runs] for name, runs in (("a", other), ("b", base))}
    loss = {name: [np.asarray(r["loss"], dtype=float) for r in runs] for name, runs in (("a", other), ("b", base))}
    seeds = len(base)

    def tau_diff(i: np.ndarray, s: np.ndarray) -> float:
        return float(np.mean([kendall(t[i], acc["a"][k][i]) - kendall(t[i], acc["b"][k][i]) for k in s]))

    def regret_diff(i: np.ndarray, s: np.ndarray) -> float:
        return float(np.mean([regret(t[i].tolist(), acc["a"][k][i].tolist(), loss["a"][k][i].tolist())
                              - regret(t[i].tolist(), acc["b"][k][i].tolist(), loss["b"][k][i].tolist())
                              for k in s]))

    out: dict[str, Any] = {}
    for key, stat in (("tau_difference", tau_diff), ("regret_difference", regret_diff)):
        value = stat(np.arange(len(t)), np.arange(seeds))
        lo, hi = joint_bootstrap(stat, len(t), seeds, resamples=resamples)
        out[key] = {"value": value, "low": lo, "high": hi,
                    "verdict": "difference" if lo > 0 or hi < 0 else "within seed noise"}
    out["per_seed_tau_difference"] = [a - b for a, b in zip(_per_seed(other, "kendall_tau"),
                                                             _per_seed(base, "kendall_tau"), strict=True)]
    return out


def quality(truth: Path, subnet_counts: Sequence[int], seeds: int, root: Path) -> dict[str, Any]:
    """Train, rank and compare; see the module. ``root``: a scratch folder for the runs."""
    import naspipe
    from naspipe.cli import main as cli
    from naspipe.ranking.stats import pairwise_tau

    common = reference_args(truth)
    out: dict[str, Any] = {"truth": str(truth), "reference_args": common, "seeds": list(range(seeds)),
                           "subnet_counts": list(subnet_counts), "samplers": list(SAMPLERS), "by_subnets": {}}
    for n in subnet_counts:
        per: dict[str, list[dict[str, Any]]] = {}
        target: list[float] = []
        for sampler in SAMPLERS:
            per[sampler] = []
            for seed in range(seeds):
                run = root / f"{n}-{sampler}-{seed}"
                assert cli(["reference", *common, "--subnets", str(n), "--seed", str(seed), "--sampler", sampler,
                            "--out", str(run), "--no-progress"]) == 0
                rep = naspipe.rank(run, truth)
                d = rep.to_dict()
                target = [rep.truth.mean_accuracy(a) for a in rep.truth.archs]
                per[sampler].append({"seed": seed, "kendall_tau": d["vs_truth"]["kendall_tau"],
                                     "regret": d["vs_truth"]["regret"], "pick": d["pick"],
                                     "accuracy": rep.run.accuracy, "loss": rep.run.loss})
                print(f"quality {n} {sampler} seed {seed}: tau {rep.vs_truth.kendall.text()}, "
                      f"regret {rep.vs_truth.regret.text(4)}", file=sys.stderr)
        row: dict[str, Any] = {"samplers": {}, "against_uniform": {}}
        for sampler, runs in per.items():
            taus, regrets = _per_seed(runs, "kendall_tau"), _per_seed(runs, "regret")
            floor = pairwise_tau([r["accuracy"] for r in runs])
            row["samplers"][sampler] = {
                "tau_mean": statistics.mean(taus), "tau_per_seed": taus, "seed_band": max(taus) - min(taus),
                "regret_mean": statistics.mean(regrets), "regret_per_seed": regrets,
                "supernet_seed_vs_seed_tau": floor.to_dict() if floor else None,
                "runs": [{k: v for k, v in r.items() if k not in ("accuracy", "loss")} for r in runs]}
        for sampler in SAMPLERS[1:]:
            row["against_uniform"][sampler] = compare(target, per["uniform"], per[sampler])
        out["by_subnets"][str(n)] = row
    rep0 = naspipe.rank(root / f"{subnet_counts[0]}-uniform-0", truth)
    out["truth_seed_vs_seed_tau"] = rep0.floor_truth.to_dict() if rep0.floor_truth else None
    return out
