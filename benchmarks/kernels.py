"""What pinning the CPU kernels costs, and which bits each kind gives on this machine (issue 40).

For every case (the presets, and the truth space with its own optimizer), ``naspipe reference`` is run with each
kernels kind (``native``, ``avx2``, ``portable``: ``naspipe.lifecycle.kernels``) in a fresh process, the kinds in
a rotated order each round (paired and alternating, so a drift in the machine's speed lands on every kind). The
time is the reference's own training time (``metrics.json``'s ``wall_s``: the interpreter's start and torch's
import excluded). Per case: the median time per kind, the median of the per-round ratios against ``native``
with their range, and the ``params.json`` digest each kind gives (the same every round, or the run is not
reproducible at all). Writes ``benchmarks/results/NAME.json`` and the table between NAME's markers in
docs/reproducibility.md (``--table-only`` rewrites the table from the JSON alone). NAME is ``kernels`` by default;
another keeps a second CPU's measurement beside the first (``--name kernels_amd_epyc``).

    python benchmarks/kernels.py [--rounds 5] [--subnets 200] [--quick] [--name NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, replace_marked, write_result

from naspipe.lifecycle import kernels

DOC = ROOT / "docs" / "reproducibility.md"


def markers(name: str) -> tuple[str, str]:
    """The docs markers around NAME's table."""
    return f"<!-- {name}-table:begin (benchmarks/kernels.py) -->", f"<!-- {name}-table:end -->"


CASES = {
    "digits-cnn": ["--space", "digits-cnn"],
    "tiny-transformer": ["--space", "tiny-transformer"],
    "sparse-mlp": ["--space", "sparse-mlp"],
    "digits-truth (momentum)": ["--space", str(ROOT / "data" / "spaces" / "digits-truth.json"), "--optimizer",
                                "momentum", "--lr", "0.05", "--shared-layers", "serial"],
}
NAPSIPE = str(Path(sys.executable).with_name("naspipe"))
SAMPLER = "uniform"  # the default when kernels.json was measured: the bits of every table compare across CPUs


def one(case: list[str], kind: str, subnets: int, out: Path) -> tuple[float, str]:
    cmd = [NAPSIPE, "reference", *case, "--subnets", str(subnets), "--seed", "0", "--sampler", SAMPLER, "--no-progress",
           "--overwrite", "--kernels", kind, "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}")
    wall = float(json.loads((out / "metrics.json").read_text())["wall_s"])
    return wall, hashlib.sha256((out / "params.json").read_bytes()).hexdigest()


def measure(rounds: int, subnets: int, cases: dict[str, list[str]]) -> dict[str, Any]:
    kinds = [k for k in kernels.KINDS if kernels.kind_error(k) is None]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases.items():
            walls: dict[str, list[float]] = {k: [] for k in kinds}
            digests: dict[str, set[str]] = {k: set() for k in kinds}
            for r in range(rounds):
                order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
                for k in order:
                    w, d = one(case, k, subnets, Path(tmp) / k)
                    walls[k].append(w)
                    digests[k].add(d)
                print(f"{name} round {r + 1}/{rounds}: " + ", ".join(f"{k} {walls[k][-1]:.2f} s" for k in kinds),
                      file=sys.stderr)
            ratios = {k: sorted(a / b for a, b in zip(walls[k], walls["native"], strict=True)) for k in kinds}
            out[name] = {
                "median_s": {k: round(statistics.median(walls[k]), 3) for k in kinds},
                "samples_s": {k: [round(w, 3) for w in walls[k]] for k in kinds},
                "ratio_to_native_median": {k: round(statistics.median(ratios[k]), 3) for k in kinds},
                "ratio_to_native_range": {k: [round(ratios[k][0], 3), round(ratios[k][-1], 3)] for k in kinds},
                "params_sha256": {k: sorted(digests[k]) for k in kinds},
                "reproducible": all(len(v) == 1 for v in digests.values()),
            }
    return out


def table(data: dict[str, Any]) -> str:
    kinds = [k for k in kernels.KINDS if k in next(iter(data["cases"].values()))["median_s"]]
    head = "| case | " + " | ".join(f"{k}: s (x native)" for k in kinds) + " | bits per kind |"
    lines = [f"Measured on {data['environment']['cpu']} ({data['cpu_capability_native']} natively), "
             f"{data['subnets']} subnets, {data['rounds']} rounds, `benchmarks/kernels.py`:", "", head,
             "|---" * (len(kinds) + 2) + "|"]
    for name, c in data["cases"].items():
        cells = [f"{c['median_s'][k]:.2f} ({c['ratio_to_native_median'][k]:.2f}, "
                 f"{c['ratio_to_native_range'][k][0]:.2f}-{c['ratio_to_native_range'][k][1]:.2f})" for k in kinds]
        bits = ", ".join(f"{k} `{c['params_sha256'][k][0][:8]}`" for k in kinds)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {bits} |")
    geo = data["geomean_ratio_presets"]
    lines += ["", "Geometric mean over the presets of the median ratio against native: "
              + ", ".join(f"{k} {v:.2f}x" for k, v in geo.items()) + "."]
    return "\n".join(lines)


def write_doc_table(data: dict[str, Any], name: str = "kernels") -> None:
    replace_marked(DOC, *markers(name), table(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--subnets", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="one case (digits-cnn), one round, 12 subnets (the test's "
                    "smoke run)")
    ap.add_argument("--table-only", action="store_true", help="rewrite NAME's docs table from NAME.json")
    ap.add_argument("--no-write", action="store_true", help="print the JSON only (the smoke run)")
    ap.add_argument("--name", default="kernels", help="the JSON's name and its table's markers (default kernels)")
    a = ap.parse_args()
    if not re.fullmatch(r"kernels(_\w+)?", a.name):
        ap.error(f"--name {a.name!r}: kernels or kernels_SOMETHING (the test reads every kernels*.json's table)")
    if a.table_only:
        write_doc_table(json.loads((RESULTS / f"{a.name}.json").read_text()), a.name)
        return
    cases = {"digits-cnn": CASES["digits-cnn"]} if a.quick else CASES  # (the cheapest preset to build)
    rounds, subnets = (1, 12) if a.quick else (a.rounds, a.subnets)
    res = measure(rounds, subnets, cases)
    presets = [c for n, c in res.items() if not n.startswith("digits-truth")]
    geo = {k: round(statistics.geometric_mean([c["ratio_to_native_median"][k] for c in presets]), 3)
           for k in next(iter(res.values()))["median_s"]}
    data = {"rounds": rounds, "subnets": subnets, "cases": res, "geomean_ratio_presets": geo,
            "cpu_capability_native": kernels.native_capability(), "default": kernels.DEFAULT}
    if a.no_write:
        print(json.dumps(data, indent=1))
        return
    write_result(a.name, data)
    write_doc_table(json.loads((RESULTS / f"{a.name}.json").read_text()), a.name)


if __name__ == "__main__":
    main()
