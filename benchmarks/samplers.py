"""Issue 24: samplers that pipeline. Uniform, strict-fair and conflict-spreading sequences, simulated and run.

Two parts, both written to ``benchmarks/results/samplers.json``:

* ``simulated``: the default scheduler on naspipe-k12/k48/k96 with 4 and 8 stages, 1000 subnets, the same
  seed, for ``uniform``, ``fair`` and ``spread`` (``spread:fair``): throughput (subnets/s), utilisation, and
  the sequence's conflict structure (``naspipe.sequences.conflicts``: subnets reusing a candidate of one of the
  ``stages - 1`` before them, min and mean reuse distance). Acceptance (4 stages): fair >= 1.9x uniform
  with utilisation >= 0.95 on k48, >= 2.5x on k12, >= 1.35x on k96.
* ``runtime``: real training (``naspipe.runtime.train``), tiny-transformer and digits-cnn, 2 stages, csp,
  uniform against fair, ``--repeats`` paired repeats in alternating order (uniform first in even repeats,
  fair first in odd ones) so machine load hits both alike; every run is verified bit-identical
  (``naspipe.runfolder.results.verify``) to ``naspipe reference`` trained with the same sampler. Headline: the median
  over repeats of the fair / uniform subnets/s ratio measured within one repeat (acceptance on
  tiny-transformer: >= 1.3).

* ``quality``: does a sampler rank architectures better or worse? For each sampler and each of
  ``--quality-seeds`` seeds, ``naspipe reference`` trains a supernet of the ground truth's space with the
  truth's optimizer, learning rate and shared-layer mode (``--truth DIR``, default the shipped
  ``data/truth/digits-truth``; another truth is this one argument) at each of ``--quality-subnets`` subnet
  counts, and ``naspipe.rank`` scores it against the truth: Kendall tau and the regret of the pick, each with
  its 95% bootstrap interval over architectures. Per sampler: the seeds' mean, their spread (the seed band:
  the largest difference a change of seed alone made) and the supernet seed-vs-seed tau. Fair and spread
  against uniform: the mean over seeds of the paired (same seed) difference, with a 95% interval from a
  bootstrap over seeds and architectures together, so it holds the seed noise; "difference" only where that
  interval excludes zero, otherwise "within seed noise". Reported whatever its sign.

Run: ``.venv/bin/python benchmarks/samplers.py [--part sim|runtime|quality|both|all] [--repeats 5]
[--subnets-runtime 120] [--spaces tiny-transformer digits-cnn] [--truth DIR] [--quality-seeds 5]
[--quality-subnets 300 900]`` (``both`` = sim and runtime; a part or space not rerun keeps its last result
in the JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, write_result

from naspipe.runspec.spec import RunSpec

SIM_SPACES = ("naspipe-k12", "naspipe-k48", "naspipe-k96")
SIM_STAGES = (4, 8)
SAMPLERS = ("uniform", "fair", "spread")
RUNTIME_SPACES = ("tiny-transformer", "digits-cnn")
DEFAULT_TRUTH = ROOT / "data" / "truth" / "digits-truth"
TARGETS = {"naspipe-k12": (2.5, None), "naspipe-k48": (1.9, 0.95), "naspipe-k96": (1.35, None)}


def simulated(subnets: int, seed: int) -> dict[str, Any]:
    from naspipe.runspec.spec import DEFAULT_POLICY
    from naspipe.sequences.conflicts import conflict_stats
    from naspipe.sequences.samplers import make_stream
    from naspipe.sim import simulate
    from naspipe.spaces.partition import partition
    from naspipe.spaces.space import preset

    rows = []
    for name in SIM_SPACES:
        sp = preset(name)
        for stages in SIM_STAGES:
            part = partition(sp, stages)
            for sampler in SAMPLERS:
                stream = make_stream(sp, seed, subnets, sampler)
                r = simulate(RunSpec.of(sp, part, stream, DEFAULT_POLICY))
                rows.append({"space": name, "stages": stages, "sampler": str(sampler), "subnets": subnets,
                             "policy": r.extra.get("plan", {}).get("policy", DEFAULT_POLICY),
                             "throughput": subnets / r.makespan, "utilization": r.utilization,
                             "sequence": conflict_stats(sp, list(stream), stages)})
                print(f"sim {name} {stages} {sampler}: {rows[-1]['throughput']:.1f} subnets/s, "
                      f"utilisation {r.utilization:.3f}", file=sys.stderr)
    speedups = {}
    for name in SIM_SPACES:
        for stages in SIM_STAGES:
            got = {r["sampler"]: r for r in rows if r["space"] == name and r["stages"] == stages}
            for s in ("fair", "spread"):
                speedups[f"{name}@{stages}:{s}"] = got[s]["throughput"] / got["uniform"]["throughput"]
    accept = {}
    for name, (ratio, util) in TARGETS.items():
        fair = next(r for r in rows if r["space"] == name and r["stages"] == 4 and r["sampler"] == "fair")
        got = speedups[f"{name}@4:fair"]
        accept[name] = {"fair_vs_uniform": got, "target": ratio, "utilization": fair["utilization"],
                        "target_utilization": util,
                        "met": got >= ratio and (util is None or fair["utilization"] >= util)}
    return {"policy": DEFAULT_POLICY, "seed": seed, "rows": rows, "speedup_vs_uniform": speedups,
            "acceptance": accept}


def runtime(spaces: list[str], subnets: int, repeats: int, seed: int, root: Path) -> dict[str, Any]:
    from naspipe.cli import main as cli
    from naspipe.runfolder.results import verify
    from naspipe.runtime import TrainConfig, train

    out: dict[str, Any] = {}
    for name in spaces:
        refs, cfgs = {}, {}
        for sampler in ("uniform", "fair"):
            ref = root / f"{name}-{sampler}-ref"
            assert cli(["reference", "--space", name, "--subnets", str(subnets), "--seed", str(seed), "--sampler",
                        sampler, "--shared-layers", "frozen", "--out", str(ref), "--no-progress"]) == 0
            refs[sampler] = ref
            cfgs[sampler] = TrainConfig.create(name, root / "warm", stages=2, subnets=subnets, seed=seed,
                                               sampler=sampler, policy="csp", progress=False, timeout=300,
                                               shared_layers="frozen")  # as measured (the old default)
        # warm-up: the fork server (torch imported once), so no measured run pays for it
        train(cfgs["uniform"].replace(out=root / "warm", sequence=cfgs["uniform"].sequence[:8], overwrite=True))
        runs: dict[str, list[dict[str, Any]]] = {"uniform": [], "fair": []}
        for r in range(repeats):
            for sampler in (("uniform", "fair") if r % 2 == 0 else ("fair", "uniform")):
                res = train(cfgs[sampler].replace(out=root / f"{name}-{sampler}-{r}"))
                ok, msg = verify(res.out, refs[sampler])
                m = res.metrics
                runs[sampler].append({"subnets_per_s": m["subnets_per_s"], "utilization": m["utilization"],
                                      "makespan_s": m["makespan_s"], "verified": bool(ok),
                                      **({} if ok else {"verify": msg})})
                print(f"run {name} {sampler} {r}: {m['subnets_per_s']:.2f} subnets/s, verified {ok}", file=sys.stderr)
        ratios = [f["subnets_per_s"] / u["subnets_per_s"] for f, u in zip(runs["fair"], runs["uniform"], strict=True)]
        out[name] = {
            "stages": 2, "policy": "csp", "subnets": subnets, "repeats": repeats, "seed": seed,
            "partition": cfgs["fair"].partition.to_list(),
            "fair_vs_uniform_paired": ratios, "fair_vs_uniform_paired_median": statistics.median(ratios),
            "median_subnets_per_s": {s: statistics.median(x["subnets_per_s"] for x in v) for s, v in runs.items()},
            "median_utilization": {s: statistics.median(x["utilization"] for x in v) for s, v in runs.items()},
            "all_verified": all(x["verified"] for v in runs.values() for x in v),
            "sequence": {s: json.loads((refs[s] / "metrics.json").read_text())["config"].get("sequence_sha256")
                         for s in refs},
            "runs": runs,
        }
    return out


def runtime_acceptance(rt: dict[str, Any]) -> dict[str, Any] | None:
    """Acceptance on tiny-transformer: paired median fair / uniform >= 1.3, every run verified."""
    tt = rt.get("tiny-transformer")
    if tt is None:
        return None
    got = tt["fair_vs_uniform_paired_median"]
    return {"space": "tiny-transformer", "target": 1.3, "fair_vs_uniform_paired_median": got,
            "met": got >= 1.3 and tt["all_verified"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("sim", "runtime", "quality", "both", "all"), default="both",
                    help="both = sim and runtime; all = the three (default %(default)s)")
    ap.add_argument("--subnets", type=int, default=1000, help="simulated subnets (default %(default)s)")
    ap.add_argument("--subnets-runtime", type=int, default=120, help="trained subnets per run (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="paired runtime repeats (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spaces", nargs="+", choices=RUNTIME_SPACES, default=list(RUNTIME_SPACES),
                    help="runtime part: the spaces to run (others keep their last result; default both)")
    ap.add_argument("--truth", type=Path, default=DEFAULT_TRUTH,
                    help="quality part: the ground truth folder (naspipe truth; default %(default)s)")
    ap.add_argument("--quality-seeds", type=int, default=5, help="quality part: supernet seeds per sampler "
                    "(default %(default)s)")
    ap.add_argument("--quality-subnets", type=int, nargs="+", default=[300, 900],
                    help="quality part: subnet counts (default %(default)s)")
    args = ap.parse_args()
    for flag, v in (("--subnets", args.subnets), ("--subnets-runtime", args.subnets_runtime),
                    ("--repeats", args.repeats), ("--quality-subnets", min(args.quality_subnets))):
        if v < 1:
            ap.exit(2, f"samplers.py: error: {flag} must be >= 1, got {v}\n")
    if args.quality_seeds < 2:
        ap.exit(2, f"samplers.py: error: --quality-seeds must be >= 2 (the seed noise needs two), "
                   f"got {args.quality_seeds}\n")
    if args.part in ("quality", "all") and not (args.truth / "truth-settings.json").is_file():
        ap.exit(2, f"samplers.py: error: --truth {args.truth}: no truth-settings.json there (make one with "
                   "naspipe truth)\n")
    previous = RESULTS / "samplers.json"  # a part not rerun keeps its last result
    result: dict[str, Any] = {}
    if previous.exists():
        old = json.loads(previous.read_text())
        result = {k: old[k] for k in ("simulated", "runtime", "search_quality") if k in old}
        if not isinstance(result.get("search_quality"), dict):
            result.pop("search_quality", None)
    t0 = time.perf_counter()
    if args.part in ("sim", "both", "all"):
        result["simulated"] = simulated(args.subnets, args.seed)
    if args.part in ("runtime", "both", "all"):
        rt = {k: v for k, v in result.get("runtime", {}).items() if k in RUNTIME_SPACES}
        with tempfile.TemporaryDirectory(prefix="naspipe-samplers-") as tmp:
            rt.update(runtime(args.spaces, args.subnets_runtime, args.repeats, args.seed, Path(tmp)))
        rt["acceptance"] = runtime_acceptance(rt)
        result["runtime"] = rt
    if args.part in ("quality", "all"):
        from sampler_quality import quality

        with tempfile.TemporaryDirectory(prefix="naspipe-quality-") as tmp:
            result["search_quality"] = quality(args.truth, args.quality_subnets, args.quality_seeds, Path(tmp))
    result["bench_seconds"] = time.perf_counter() - t0
    write_result("samplers", result)


if __name__ == "__main__":
    main()
