"""The GPU check: the CUDA paths no CPU machine exercises, in one script, under 5 minutes on one GPU.

Run it when a GPU is lent: ``python benchmarks/gpu_check.py [--out FILE]``. Each check is recorded as
``{"ok": true|false|null, "detail": ..., "seconds": ...}`` (``null`` = skipped, with the reason) in one JSON
object, printed and written to ``benchmarks/results/gpu_check.json``:

* ``cpu_runtime_vs_reference`` (CPU half): CSP on 2 stage processes against the sequential reference, bit for bit;
* ``context_cache_cpu`` (CPU half): the context cache (budget, prefetch, eviction, write-back) trains a chain
  of layers exactly as the same loop with every layer resident;
* ``cuda_runtime_vs_cuda_reference``: CSP on 2 stages on one GPU (gloo, messages through host memory: NCCL
  refuses two ranks on one device) against the ``sequential`` policy on 1 stage on the same GPU, bit for bit, with
  deterministic algorithms on (``CUBLAS_WORKSPACE_CONFIG`` set before CUDA starts);
* ``context_cache_cuda``: the cache on ``cuda:0`` with its copy stream, pinned host memory and prefetch under
  a budget, against the resident loop on the GPU, bit for bit;
* ``cell_space_cpu`` (CPU half) and ``cuda_cell_space_vs_cuda_reference``: the NAS-Bench-201-style cell space
  (``data/supernets/nb201_digits.py``: structured messages, a tuple of node states) with ``csp-bw`` on 2 stages
  against the ``sequential`` policy on 1 stage, on the CPU and on one GPU, bit for bit;
* ``nccl_two_gpus``: CSP on 2 stages, one GPU each (NCCL), against the CUDA reference: only with >= 2 GPUs;
* ``cuda_run_twice``: the same CSP run on one GPU twice, bit for bit (deterministic algorithms);
* ``host_cpu_kernels`` (CPU half): the host's CPU (a lent machine's is another kind of x86 CPU) trains the golden
  preset reference under ``--kernels portable`` and ``avx2``; its digests are recorded with the CPU's name and
  compared with the tables of ``tests/supernet/test_runs.py`` (``portable``: one table for every x86-64 CPU).

On a machine without CUDA the CUDA checks are skipped (listed under ``skipped``) and the script exits 0 when
the CPU half passes; it exits 1 when any check that ran failed.
"""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before torch starts CUDA: deterministic cuBLAS

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from _common import RESULTS, write_result  # noqa: E402
from torch import nn  # noqa: E402

SPACE = "digits-cnn"
SUBNETS = 24
CELL_SPACE = "nb201_digits:supernet"  # data/supernets/nb201_digits.py: tuple messages
SUPERNETS = Path(__file__).resolve().parents[1] / "data" / "supernets"


class Skip(Exception):
    """This check cannot run here (the reason is the message)."""


def _train(out: Path, device: str, stages: int, policy: str, space: str = SPACE) -> Any:
    from naspipe.runtime import TrainConfig, train

    cfg = TrainConfig.create(space, out, stages=stages, subnets=SUBNETS, seed=0, policy=policy, device=device,
                             progress=False, overwrite=True, timeout=120.0)
    return train(cfg)


def check_cpu_runtime(tmp: Path) -> str:
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runtime import TrainConfig

    run = _train(tmp / "cpu-csp", "cpu", 2, "csp")
    cfg = TrainConfig.create(SPACE, tmp / "x", stages=2, subnets=SUBNETS, seed=0)
    ref = train_reference(cfg.space, cfg.stream(), 0, cfg.shared).save(tmp / "cpu-ref", metrics={})
    ok, msg = run.verify(ref)
    assert ok, msg
    return msg


def _cache_loop(device: str, budget: int | None) -> dict[str, torch.Tensor]:
    """Train 8 layers on 40 steps of 3 layers each; with ``budget`` through the context cache (prefetching the
    next step's layers on its copy stream), else all resident on ``device``. Returns the final weights."""
    from naspipe.runtime.layer_cache.context import ContextCache

    d = 64
    torch.manual_seed(0)
    mods = {k: nn.Linear(d, d) for k in range(8)}
    gen = torch.Generator().manual_seed(1)
    steps = [torch.randperm(8, generator=gen)[:3].tolist() for _ in range(40)]
    xs = [torch.randn(16, d, generator=gen) for _ in steps]

    def step(keys: list[int], x: torch.Tensor) -> None:
        h = x.to(device)
        for k in keys:
            h = torch.tanh(mods[k](h))
        loss = h.square().mean()
        params = [p for k in keys for p in mods[k].parameters()]
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(0.1 * g)

    if budget is None:
        for m in mods.values():
            m.to(device)
        for keys, x in zip(steps, xs, strict=True):
            step(keys, x)
    else:
        with ContextCache(mods, device=device, budget=budget) as cache:
            for i, (keys, x) in enumerate(zip(steps, xs, strict=True)):
                cache.acquire(keys, tag=i)
                if i + 1 < len(steps):
                    cache.prefetch(steps[i + 1], tag=i + 1)
                step(keys, x)
                cache.release(keys, dirty=True)
            cache.drain()
            stats = cache.stats
            assert stats.peak_bytes <= budget, f"peak {stats.peak_bytes} > budget {budget}"
            assert stats.prefetches > 0, "no prefetch was issued"
            cache.evict(list(mods))
            cache.drain()
    return {f"{k}.{n}": p.detach().cpu().clone() for k, m in mods.items() for n, p in m.named_parameters()}


def _check_cache(device: str) -> str:
    nb = (64 * 64 + 64) * 4
    want = _cache_loop(device, None)
    got = _cache_loop(device, 5 * nb)  # room for 5 of 8 layers: evictions and write-backs happen
    bad = [k for k in want if not torch.equal(want[k], got[k])]
    assert not bad, f"{len(bad)} tensors differ through the cache, first {bad[0]}"
    return f"identical: {len(want)} tensors after 40 steps, budget 5 of 8 layers on {device}"


def _need_cuda(n: int = 1) -> None:
    if not torch.cuda.is_available():
        raise Skip("no CUDA device")
    if torch.cuda.device_count() < n:
        raise Skip(f"needs {n} GPUs, found {torch.cuda.device_count()}")


def check_cuda_runtime(tmp: Path) -> str:
    _need_cuda()
    torch.use_deterministic_algorithms(True)
    ref = _train(tmp / "cuda-ref", "cuda", 1, "sequential")
    run = _train(tmp / "cuda-csp2", "cuda", 2, "csp")
    backend = run.trace.meta.get("backend")
    ok, msg = run.verify(ref.out)
    assert ok, f"CSP on 2 stages of one GPU ({backend}) vs the CUDA reference: {msg}"
    return f"{msg} (2 stages on one GPU, backend {backend})"


def check_cuda_twice(tmp: Path) -> str:
    _need_cuda()
    torch.use_deterministic_algorithms(True)
    a = _train(tmp / "cuda-a", "cuda", 2, "csp")
    b = _train(tmp / "cuda-b", "cuda", 2, "csp")
    ok, msg = a.verify(b.out)
    assert ok, f"one CSP run on one GPU, twice: {msg}"
    return f"{msg} (CSP, 2 stages on one GPU, twice)"


# tests/supernet/test_runs.py's PRESET_DIGESTS for digits-cnn (30 subnets, seed 0, frozen shared layers)
GOLDEN_DIGITS_CNN = {
    "portable": "fc995dde8002a2e408037ff00691862e68cf364f04fd8a22f881d84955024b08",
    "avx2 on GenuineIntel": "531701f79286d908aada0191c63221179bf44655c73d2cc6e51245044ac3ca67",
    "avx2 on AuthenticAMD": "0cfcf373cb1517d7fa89b1695ade03c08e95ec04a454f3ef46c59eb4cf75b957",
}


def check_host_kernels(tmp: Path) -> str:
    import hashlib
    import subprocess

    from naspipe.lifecycle import kernels

    if kernels.kind_error("portable") is not None:
        raise Skip(kernels.kind_error("portable"))
    got, said = {}, []
    for kind in ("portable", "avx2"):
        out = tmp / f"host-{kind}"
        cmd = [str(Path(sys.executable).with_name("naspipe")), "reference", "--space", SPACE, "--subnets", "30",
               "--seed", "0", "--shared-layers", "frozen", "--no-progress", "--kernels", kind, "--sampler", "uniform",
               "--out", str(out)]  # (the sampler the digests were recorded with)
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        got[kind] = hashlib.sha256((out / "params.json").read_bytes()).hexdigest()
        key = kind if kind == "portable" else f"avx2 on {kernels.cpu_vendor()}"
        want = GOLDEN_DIGITS_CNN.get(key)
        said.append(f"{kind} {got[kind][:12]} ({'as recorded' if got[kind] == want else 'NOT as recorded'}"
                    f"{'' if want else ': no record'})")
    assert got["portable"] == GOLDEN_DIGITS_CNN["portable"], f"portable on {kernels.cpu_name()}: {said}"
    return f"{kernels.cpu_name()}: " + ", ".join(said)


def check_cuda_cache(tmp: Path) -> str:
    _need_cuda()
    torch.use_deterministic_algorithms(True)
    return _check_cache("cuda:0")


def _check_cell_space(tmp: Path, device: str) -> str:
    if str(SUPERNETS) not in sys.path:
        sys.path.insert(0, str(SUPERNETS))  # (spawned stage processes inherit sys.path)
    ref = _train(tmp / f"cell-ref-{device}", device, 1, "sequential", CELL_SPACE)
    run = _train(tmp / f"cell-csp-bw-{device}", device, 2, "csp-bw", CELL_SPACE)
    ok, msg = run.verify(ref.out)
    assert ok, f"the cell space (tuple messages), csp-bw on 2 stages, on {device}: {msg}"
    return f"{msg} (tuple messages, csp-bw, 2 stages on {device}, backend {run.trace.meta.get('backend')})"


def check_cuda_cell_space(tmp: Path) -> str:
    _need_cuda()
    torch.use_deterministic_algorithms(True)
    return _check_cell_space(tmp, "cuda")


def check_nccl(tmp: Path) -> str:
    _need_cuda(2)
    ref = tmp / "cuda-ref"
    if not (ref / "params.json").is_file():
        ref = _train(ref, "cuda", 1, "sequential").out
    run = _train(tmp / "cuda-nccl", "cuda", 2, "csp")
    backend = run.trace.meta.get("backend")
    assert backend == "nccl", f"expected nccl with one GPU per stage, got {backend}"
    ok, msg = run.verify(ref)
    assert ok, f"NCCL run vs the CUDA reference: {msg}"
    return f"{msg} (backend nccl)"


CHECKS: dict[str, Callable[[Path], str]] = {
    "cpu_runtime_vs_reference": check_cpu_runtime,
    "context_cache_cpu": lambda tmp: _check_cache("cpu"),
    "cuda_runtime_vs_cuda_reference": check_cuda_runtime,
    "context_cache_cuda": check_cuda_cache,
    "cell_space_cpu": lambda tmp: _check_cell_space(tmp, "cpu"),
    "cuda_cell_space_vs_cuda_reference": check_cuda_cell_space,
    "nccl_two_gpus": check_nccl,
    "cuda_run_twice": check_cuda_twice,
    "host_cpu_kernels": check_host_kernels,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=sorted(CHECKS), help="run only these checks")
    ap.add_argument("--out", default=None, help=f"JSON file (default {RESULTS / 'gpu_check.json'})")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="naspipe-gpu-check-") as d:
        for name, fn in CHECKS.items():
            if args.only and name not in args.only:
                continue
            t0 = time.perf_counter()
            try:
                results[name] = {"ok": True, "detail": fn(Path(d))}
            except Skip as e:
                results[name] = {"ok": None, "detail": f"skipped: {e}"}
            except Exception as e:  # noqa: BLE001 - every check reports, none stops the others
                results[name] = {"ok": False, "detail": f"{type(e).__name__}: {e}",
                                 "traceback": traceback.format_exc(limit=6)}
            results[name]["seconds"] = round(time.perf_counter() - t0, 2)
            print(f"{name}: {results[name]['detail']}", file=sys.stderr, flush=True)
    cuda = torch.cuda.is_available()
    data = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count() if cuda else 0,
            "gpu_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
            "checks": results, "skipped": [k for k, v in results.items() if v["ok"] is None],
            "failed": [k for k, v in results.items() if v["ok"] is False]}
    if args.out:
        import json

        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
        print(json.dumps(data, indent=1))
    else:
        write_result("gpu_check", data)
    return 1 if data["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
