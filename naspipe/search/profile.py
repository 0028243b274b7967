"""Measure a latency profile: the forward time of every candidate on one batch, in the profile file format.

Each candidate runs on the activation its block really receives (the input passed through the earlier
blocks' first candidates), ``repeats`` times after one warm-up, on one intra-op thread (as every stage
process runs); the median is kept. The output is what ``SearchCosts.with_profile`` and ``naspipe search
--profile`` read. Timings are machine-dependent, so a search with a measured profile is reproducible only
given the same profile file.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from naspipe.models import StageModel, make_batch
from naspipe.space import SearchSpace


def measure_profile(model: StageModel, seed: int = 0, repeats: int = 5) -> dict[str, Any]:
    """``{"unit": "s", "space": name, "batch_size": B, "blocks": {block: {candidate: seconds}}}``."""
    space = model.space
    x = make_batch(space, seed, 0).input
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every stage process and the reference run
    try:
        return _measure(model, space, x, repeats)
    finally:
        torch.set_num_threads(threads)


def _measure(model: StageModel, space: SearchSpace, x: torch.Tensor, repeats: int) -> dict[str, Any]:
    blocks: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for b, blk in enumerate(space.blocks):
            times: dict[str, float] = {}
            for c, cand in enumerate(blk.candidates):
                sub = [0] * space.num_blocks
                sub[b] = c
                one = _single_block(model, b)
                one(x, sub)  # warm-up
                samples = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    one(x, sub)
                    samples.append(time.perf_counter() - t0)
                times[cand.name] = statistics.median(samples)
            blocks[blk.name] = times
            x = _single_block(model, b)(x, [0] * space.num_blocks)
    return {"unit": "s", "space": space.name, "batch_size": space.batch_size, "blocks": blocks}


def _single_block(model: StageModel, b: int) -> Callable[[torch.Tensor, list[int]], torch.Tensor]:
    """Run block ``b`` alone: its module (fixed) or its chosen candidate's module in ``model.layers``."""
    blk = model.space.blocks[b]
    mod = model.layers[blk.name]

    def run(x: torch.Tensor, subnet: list[int]) -> torch.Tensor:
        return mod(x) if blk.fixed else mod[blk.candidates[subnet[b]].name](x)
    return run
