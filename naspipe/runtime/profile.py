"""Measured per-block costs, for a partition balanced on this machine rather than on the cost model.

Why it exists: a space's cost model (relative op costs) can be far from the real costs of its torch
modules (a decoder block with cross-attention, the head with the loss), and the pipeline runs at the
pace of its slowest stage. ``measure_block_costs`` builds every block as its own one-block stage, runs a
few uniformly sampled subnets through them forward and backward block by block (each block's input a
fresh leaf, exactly as at a stage boundary), and returns the mean forward + backward seconds per block
under uniform sampling, which ``naspipe.partition.partition(space, P, profile=...)`` balances. Any
partition gives bit-identical training, so a measured partition never affects results, only speed.
"""

from __future__ import annotations

import time

import torch

from naspipe.models import build_stage, input_of, make_batch, target_of
from naspipe.sequence import UniformStream
from naspipe.shared import SharedLayers
from naspipe.space import SearchSpace


def measure_block_costs(space: SearchSpace, seed: int = 0, samples: int = 6, threads: int = 1) -> list[float]:
    """Mean forward + backward seconds of each block (over ``samples`` subnets, after one warm-up)."""
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        blocks = [build_stage(space, range(b, b + 1), seed, SharedLayers("serial")) for b in range(space.num_blocks)]
        stream = UniformStream(space, seed + 7919, samples + 1)
        total = [0.0] * space.num_blocks
        for i in range(samples + 1):
            sub = stream[i]
            batch = make_batch(space, seed, i)
            x = input_of(space, batch)
            ins, outs, fwd = [], [], []
            for b, m in enumerate(blocks):
                if b > 0:
                    x = x.detach().requires_grad_(True)
                ins.append(x)
                t = time.perf_counter()
                x = m(x, sub)
                if b == space.num_blocks - 1:
                    x = m.loss(x, target_of(space, batch))
                fwd.append(time.perf_counter() - t)
                outs.append(x)
            grad = None
            for b in reversed(range(space.num_blocks)):
                t = time.perf_counter()
                if outs[b].requires_grad and (grad is not None or outs[b].dim() == 0):
                    torch.autograd.backward(outs[b], grad)
                grad = ins[b].grad if b > 0 and ins[b].requires_grad else None
                if i > 0:  # the first subnet warms up
                    total[b] += fwd[b] + time.perf_counter() - t
        return [t / samples for t in total]
    finally:
        torch.set_num_threads(old_threads)
