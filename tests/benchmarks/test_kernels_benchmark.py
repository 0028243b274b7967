"""``benchmarks/kernels.py`` runs: its quick path (one preset, one round, every kernels kind this CPU can run)
gives each kind one stable digest and a time, the kinds' digests differ, and each docs table reads its JSON."""

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


def test_each_docs_table_is_its_json_s():
    """Every measurement kept (``kernels.json``, and one per further CPU: ``--name kernels_...``) is the table
    between its own markers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import kernels as bench  # noqa: PLC0415 - the benchmark script as a module

    doc = (ROOT / "docs" / "reproducibility.md").read_text()
    kept = sorted((ROOT / "benchmarks" / "results").glob("kernels*.json"))
    assert [p.stem for p in kept][:1] == ["kernels"], kept
    for path in kept:
        begin, end = bench.markers(path.stem)
        assert f"{begin}\n{bench.table(json.loads(path.read_text()))}\n{end}" in doc, path.name
