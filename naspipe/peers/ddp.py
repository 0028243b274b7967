"""Plain data parallelism over the whole supernet: the peer NNI, Once-for-All and AutoFormer train with.

Why it exists: the honest alternative to a CSP pipeline is not a sequential loop but ``R`` data-parallel
ranks, each holding the whole supernet, each computing shard ``r`` of every subnet's batch
(``naspipe.models.shards``), on the same subnet sequence and the same batches as the pipeline. Two ways to
combine the gradients, as users run them:

* ``used``: one bucketed all-reduce (a single flat tensor) of the gradients of the parameters the subnet
  used, averaged, then one optimizer step (the careful hand-written version);
* ``wrapper``: torch's ``DistributedDataParallel`` with ``find_unused_parameters=True`` (what a supernet
  needs to run under DDP at all): it all-reduces the buckets of the whole supernet every step.

``run_ddp`` starts the ranks (processes of the stages' fork server, spawned where there is none, so they start
with the environment the server started with; gloo on the CPU, every wait with a timeout, no process left
behind) and returns the loop's wall time; ``benchmarks/vs_ddp.py`` measures it beside CSP.
With one rank there is nothing to combine: the single-process baseline, on the same code path.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MODES = ("used", "wrapper")


def worker(rank: int, world: int, space: Any, subnets: Sequence[Sequence[int]], seed: int, mode: str, port: int,
           threads: int, timeout: float, out: str) -> None:
    """One DDP rank (process target): train ``subnets`` on shard ``rank`` of each batch; rank 0 writes ``out``."""
    import torch

    torch.set_num_threads(threads)
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
    try:
        _train(rank, world, space, subnets, seed, mode, out)
    except BaseException as e:  # the traceback holds _train's frame, and so the wrapper: let it go
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        # torch's DDP wrapper holds the process group; it must be gone before the group is destroyed, or the
        # group's gloo threads are torn down at interpreter exit ("terminate called", SIGABRT; seen under spawn)
        gc.collect()
        dist.destroy_process_group()


def _train(rank: int, world: int, space: Any, subnets: Sequence[Sequence[int]], seed: int, mode: str,
           out: str) -> None:
    import torch
    import torch.distributed as dist

    from naspipe.models import build_stage, make_batch, make_optimizer
    from naspipe.models.shards import shard_batch
    from naspipe.spaces.shared import SharedLayers

    model = build_stage(space, range(space.num_blocks), seed, SharedLayers())
    opt = make_optimizer(model.parameters(), "sgd", None)
    net: Any = model
    if mode == "wrapper" and world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, find_unused_parameters=True)
    make_batch(space, seed, 0)  # lazily-built data before the clock starts
    dist.barrier()
    t0 = time.perf_counter()
    reduced = 0
    for j, sub in enumerate(subnets):
        x, y = shard_batch(space, *make_batch(space, seed, j), rank, world)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(net(x, tuple(sub)), y)
        loss.backward()
        if mode == "used" and world > 1:
            used = [p for p in model.parameters() if p.grad is not None]
            flat = torch.cat([p.grad.reshape(-1) for p in used])
            dist.all_reduce(flat)
            flat.div_(world)
            reduced += flat.numel() * flat.element_size()
            at = 0
            for p in used:
                p.grad.copy_(flat[at:at + p.numel()].view_as(p.grad))
                at += p.numel()
        opt.step()
    dist.barrier()
    wall = time.perf_counter() - t0
    if rank == 0:
        from naspipe.runfolder.results import param_hashes

        Path(out).write_text(json.dumps({"wall_s": wall, "subnets": len(subnets), "bytes_reduced": reduced,
                                         "final_loss": loss.item(),
                                         "params": param_hashes(model.global_named_parameters())}))


def run_ddp(space: Any, subnets: Sequence[Sequence[int]], *, ranks: int, mode: str = "used", seed: int = 0,
            threads: int = 1, timeout: float = 600.0, workdir: str | Path) -> dict[str, Any]:
    """Train ``subnets`` on ``ranks`` DDP processes; ``{"wall_s", "subnets", "subnets_per_s", ...}`` of rank 0."""
    from naspipe.lifecycle.mainless import start as start_without_main
    from naspipe.runtime.processes.launcher import process_context
    from naspipe.runtime.transport.ports import free_port
    from naspipe.spaces.space import replicas_error

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    if (why := replicas_error(space.batch_size, ranks)) is not None:
        raise ValueError(f"{ranks} ranks: {why}")
    out = Path(workdir) / f"ddp-{mode}-{ranks}-{time.monotonic_ns()}.json"
    ctx = process_context("forkserver")  # torch and torch._dynamo loaded once, not once per rank
    port = free_port("127.0.0.1")
    procs = [ctx.Process(target=worker, daemon=True, name=f"naspipe-ddp{r}",
                         args=(r, ranks, space, [list(s) for s in subnets], seed, mode, port, threads, timeout,
                               str(out))) for r in range(ranks)]
    for p in procs:
        start_without_main(p)
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        bad = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
        if bad:
            raise RuntimeError(f"ddp ranks failed or timed out after {timeout:g} s: {bad}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
    data = json.loads(out.read_text())
    data["subnets_per_s"] = data["subnets"] / data["wall_s"]
    return data
