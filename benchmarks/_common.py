"""Shared helpers for the benchmark scripts: import the package from this checkout, write JSON results.

Each benchmark prints its JSON to stdout and writes the same object to ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from naspipe.runspec.spec import RunSpec
from naspipe.sim import SimOptions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:  # run as `python benchmarks/X.py`: use this checkout's package
    sys.path.insert(0, str(ROOT))


def _cpu_model() -> str | None:
    """The CPU's model name (speeds, and bits, differ between kinds of CPU: docs/reproducibility.md)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def environment() -> dict[str, Any]:
    """Where the numbers were measured; a high load average means wall-clock numbers are inflated."""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": _cpu_model(),
            "system": platform.system(), "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_result(name: str, data: dict[str, Any], folder: Path = RESULTS) -> Path:
    """Print ``data`` (plus the environment) as JSON and write it to ``NAME.json`` in ``folder`` (default
    ``benchmarks/results``; a smoke test passes a temporary one)."""
    out = {"benchmark": name, **data, "environment": environment()}
    text = json.dumps(out, indent=1, sort_keys=False)
    print(text)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(text + "\n")
    return path


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def bounded_run(space: str, stages: int, policy: str, *, subnets: int, seed: int = 0, window: int = 200,
                policy_options: dict[str, int] | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """One simulation of ``policy`` on preset ``space`` and its causal lower bound (split when the policy
    splits the backward): ``(result, bound, row)``, the row holding makespan, utilisation, the bound, its
    critical path, the largest stage's work, efficiency (bound / makespan), the tight bound and the
    utilisation the bound allows."""
    from naspipe.sequences.sequence import UniformStream
    from naspipe.sim import simulate
    from naspipe.sim.bound import result_bound
    from naspipe.spaces.partition import partition
    from naspipe.spaces.space import preset

    sp = preset(space)
    part = partition(sp, stages)
    stream = UniformStream(sp, seed, subnets)
    r = simulate(RunSpec.of(sp, part, stream, policy, window=window), SimOptions(policy_options=policy_options))
    b = result_bound(r, sp, part, list(stream))
    return r, b, {
        "makespan": r.makespan, "utilization": r.utilization, "lower_bound": b.lower_bound,
        "critical_path": b.critical_path, "max_stage_work": max(b.stage_work),
        "efficiency": b.lower_bound / r.makespan, "tight_bound": b.tight_bound,
        "tight_efficiency": b.tight_bound / r.makespan,
        "bound_utilization": sum(b.stage_work) / (stages * b.lower_bound),
    }


def table_markers(script: str, name: str, default: tuple[str, str] | None = None) -> tuple[str, str]:
    """The markers of ``name``'s table in a docs page that ``benchmarks/SCRIPT.py --name NAME`` writes;
    ``default``: the markers of the script's first table, kept for the name it had (its page already holds them)."""
    if default is not None and name == script:
        return default
    return f"<!-- {name}-table:begin (benchmarks/{script}.py --name {name}) -->", f"<!-- {name}-table:end -->"


def estimate_text(e: dict[str, float | None] | None, digits: int = 2, missing: str = "n/a") -> str:
    """An estimate's JSON (``Estimate.to_dict``: a bound that is not a number is None) as ``value [low, high]``;
    ``missing`` for no estimate, "n/a" for a bound that is None (a column that ties every architecture)."""
    if e is None:
        return missing
    if all(e[k] is None for k in ("value", "low", "high")):
        return "n/a"
    f = (lambda x: "n/a" if x is None else f"{x:.{digits}f}")
    return f"{f(e['value'])} [{f(e['low'])}, {f(e['high'])}]"


def replace_marked(doc: Path, begin: str, end: str, body: str) -> None:
    """Put ``body`` between the markers ``begin`` and ``end`` of ``doc`` (a docs page whose table a benchmark
    writes), appending the marked block at the end when the page has none."""
    text = doc.read_text()
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)

