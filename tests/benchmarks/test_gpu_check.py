"""``benchmarks/gpu_check.py`` is ready for a GPU: here it runs its CPU half, lists what it skipped, exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the script runs its CUDA checks")
def test_gpu_check_runs_its_cpu_half_and_lists_what_it_skipped(tmp_path, warm):
    out = tmp_path / "gpu_check.json"
    proc = warm.python(SCRIPT, ["--only", "context_cache_cpu", "--only", "cuda_runtime_vs_cuda_reference", "--only",
                                "context_cache_cuda", "--only", "cuda_cell_space_vs_cuda_reference", "--only",
                                "cuda_run_twice", "--only", "host_cpu_kernels", "--out", str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["checks"]["context_cache_cpu"]["ok"] is True
    assert data["checks"]["host_cpu_kernels"]["ok"] is True, data["checks"]["host_cpu_kernels"]
    assert data["skipped"] == ["cuda_runtime_vs_cuda_reference", "context_cache_cuda",
                               "cuda_cell_space_vs_cuda_reference", "cuda_run_twice"]
    assert data["failed"] == []
