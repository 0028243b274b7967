"""``benchmarks/kernels.py`` runs: its quick path (one preset, one round, every kernels kind this CPU can run)
gives each kind one stable digest and a time, the kinds' digests differ, and the docs table reads the JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernels.py"


def test_the_kernels_benchmark_measures_every_kind():
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--no-write"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(p.stdout)
    case = data["cases"]["digits-cnn"]
    assert set(case["median_s"]) == {"native", "avx2", "portable"} and case["reproducible"]
    digests = [case["params_sha256"][k][0] for k in ("native", "avx2", "portable")]
    if data["cpu_capability_native"] == "AVX512":  # capped, torch computes otherwise: three sets of bits
        assert len(set(digests)) == 3
    assert data["default"] == "native"


def test_the_docs_table_is_the_json_s():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import kernels as bench  # noqa: PLC0415 - the benchmark script as a module

    data = json.loads((ROOT / "benchmarks" / "results" / "kernels.json").read_text())
    assert bench.table(data) in (ROOT / "docs" / "reproducibility.md").read_text()
