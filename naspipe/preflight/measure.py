"""Costs from measurement: each candidate's forward and backward time, parameter and activation bytes.

Why it exists: the scheduler, the partitioner, the memory plan and the simulated Gantt twin all read a space's
per-candidate costs; for a user's own supernet only a measurement on the chosen device can give them.
``measure_costs`` builds every block alone (exactly as a one-block stage would), feeds each candidate the
previous block's output, and times ``repeats`` forwards and backwards after a warm-up (the median; on CUDA
with synchronisation), and the backward for the input gradient alone (the split backward's ``B``). Activation
bytes are the bytes autograd saves for the backward, counted with
``torch.autograd.graph.saved_tensors_hooks``, per sample; ``message_bytes`` is the largest block output per
sample. The result is plain JSON (``save_costs``) that ``Supernet(costs=...)`` and ``--space module:function``
(from ``<module>.<function>.costs.json``) read back.

It is the project's one measuring module: ``measure_block_costs`` (the mean forward + backward seconds of
every block, for ``TrainConfig(balance="measured")``'s partition) and ``measure_profile`` (the forward
latency of every candidate, for ``naspipe search --profile``) time their work with the same clock and the
same warm-up-then-median rule (``timed``/``median_seconds``).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from naspipe.lifecycle.threads import intra_op_threads
from naspipe.spaces.space import SearchSpace, resolve_space


def timed(fn: Callable[[], Any], sync: Callable[[], None] = lambda: None) -> tuple[Any, float]:
    """``(fn(), seconds)``: the one clock of every measurement here (``sync``: wait for the device first and
    after, e.g. ``torch.cuda.synchronize``)."""
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t


def median_seconds(fn: Callable[[], Any], repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    """The median seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    return statistics.median(timed(fn, sync)[1] for _ in range(repeats))


def measure_costs(space: Any, device: str = "cpu", repeats: int = 5, threads: int = 1,
                  seed: int = 0) -> dict[str, Any]:
    """``{"candidates": {label: {name: {fwd, bwd, bwd_input_share, param_bytes, act_bytes}}},
    "message_bytes": ..., ...}``; ``bwd_input_share``: the median input-gradient-only backward (the split
    backward's ``B``) over the median full backward, which the simulator's ``csp-bw`` splits ``bwd`` by."""
    import torch

    from naspipe.models import build_stage, input_of, make_batch, target_of
    from naspipe.spaces.shared import SharedLayers
    from naspipe.supernet import messages
    from naspipe.supernet.load import without_costs

    sp: SearchSpace = resolve_space(without_costs(space))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA device")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with intra_op_threads(threads):
        batch = make_batch(sp, seed, 0)
        x = input_of(sp, batch).to(device)
        target = target_of(sp, batch)
        target = target.to(device) if isinstance(target, torch.Tensor) else target
        bs = max(1, sp.batch_size)
        out: dict[str, dict[str, dict[str, float | int]]] = {}
        message = 0
        last = sp.num_blocks - 1
        for b, blk in enumerate(sp.blocks):
            stage = build_stage(sp, range(b, b + 1), seed, SharedLayers("serial")).to(device)
            nxt = None
            for c, cand in enumerate(blk.candidates):
                mod = stage.candidate(b, c)
                fwd, bwd, bin_, saved = [], [], [], 0
                for r in range(repeats + 1):
                    xin = _fresh_input(x)
                    sizes: list[int] = []

                    def pack(t: torch.Tensor, sizes: list[int] = sizes) -> torch.Tensor:
                        sizes.append(t.numel() * t.element_size())
                        return t

                    (y, res), t_fwd = timed(partial(_forward, mod, stage, xin, target, b == last, pack), sync)
                    _, t_bwd = timed(partial(_backward_ones, res), sync)
                    if r:  # the first run warms up
                        fwd.append(t_fwd)
                        bwd.append(t_bwd)
                        saved = sum(sizes)
                    mod.zero_grad(set_to_none=True)
                    if r:  # block 0's input (the batch) never takes a gradient: its B computes nothing
                        bin_.append(_input_backward(mod, stage, x, target, b == last, sync) if b else 0.0)
                if nxt is None:
                    nxt = messages.map_leaves(torch.Tensor.detach, y)
                params = sum(p.numel() * p.element_size() for p in mod.parameters())
                med_bwd = statistics.median(bwd)
                out.setdefault(blk.name, {})[cand.name] = {
                    "fwd": statistics.median(fwd), "bwd": med_bwd,
                    "bwd_input_share": min(1.0, statistics.median(bin_) / med_bwd) if med_bwd > 0 else 0.5,
                    "param_bytes": int(params), "act_bytes": int(saved // bs)}
            if b < last:
                message = max(message, messages.nbytes(nxt) // bs)  # (a structured message: its distinct tensors)
            x = nxt
        return {"space": sp.name, "device": device, "threads": threads, "repeats": repeats,
                "batch_size": sp.batch_size, "message_bytes": int(message), "candidates": out}


def _forward(mod: Any, stage: Any, xin: Any, target: Any, last: bool, pack: Callable[[Any], Any]) -> tuple[Any, Any]:
    """A candidate's forward (and the loss on the last block), counting the bytes autograd saves (``pack``)."""
    import torch

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = mod(xin)
        return y, stage.loss(y, target) if last else y


def _backward(res: Any, grad: Any = None, runs: bool = True) -> None:
    """The backward from ``res`` (from ones, or ``grad``, for a non-scalar); nothing where ``res`` takes none."""
    import torch

    if runs and res.requires_grad:
        torch.autograd.backward(res, grad if grad is not None or res.dim() == 0 else torch.ones_like(res))


def _input_backward(mod: Any, stage: Any, x: Any, target: Any, last: bool, sync: Any) -> float:
    """Seconds of the split backward's ``B`` on a fresh forward: the input gradient alone
    (``torch.autograd.grad``, no weight-gradient kernel); 0 where the input takes no gradient (token ids)."""
    import torch

    from naspipe.supernet import messages

    xin = _fresh_input(x)
    wrt = [t for t in messages.leaves(xin) if t.requires_grad]
    if not wrt:
        return 0.0
    y = mod(xin)
    res = stage.loss(y, target) if last else y
    roots = [t for t in messages.leaves(res) if t.requires_grad]
    if not roots:
        return 0.0
    return timed(lambda: torch.autograd.grad(roots, wrt, [torch.ones_like(r) for r in roots], allow_unused=True),
                 sync)[1]


def _fresh_input(x: Any) -> Any:
    """A block's input cut from the graph, its floating tensors requiring grad (a tensor or a structured message)."""
    from naspipe.supernet import messages

    return messages.map_leaves(lambda t: t.detach().requires_grad_(t.is_floating_point()), x)


def _backward_ones(res: Any) -> None:
    """Backward from ``res`` (a scalar loss, a tensor or a structured message) seeded with ones; nothing where
    it takes no gradient."""
    import torch

    from naspipe.supernet import messages

    roots = [t for t in messages.leaves(res) if t.requires_grad]
    if roots:
        torch.autograd.backward(roots, [torch.ones_like(r) for r in roots])


def save_costs(costs: dict[str, Any], path: str | Path) -> Path:
    """Write ``costs`` to ``path`` atomically (a temporary file beside it, then renamed): a reader never sees
    half a profile, and a failed write leaves the previous one."""
    from naspipe.fileio.atomic import check_writable, write_atomic

    p = check_writable(path, "profile", file=True)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, (json.dumps(costs, indent=1, sort_keys=True) + "\n").encode())
    return p


def measure_block_costs(space: SearchSpace, seed: int = 0, samples: int = 6, threads: int = 1) -> list[float]:
    """Mean forward + backward seconds of each block (over ``samples`` subnets, after one warm-up)."""

    from naspipe.models import build_stage, input_of, make_batch, target_of
    from naspipe.sequences.sequence import UniformStream
    from naspipe.spaces.shared import SharedLayers

    with intra_op_threads(threads):
        blocks = [build_stage(space, range(b, b + 1), seed, SharedLayers("serial")) for b in range(space.num_blocks)]
        stream = UniformStream(space, seed + 7919, samples + 1)
        total = [0.0] * space.num_blocks
        for i in range(samples + 1):
            sub = stream[i]
            batch = make_batch(space, seed, i)
            x, target = input_of(space, batch), target_of(space, batch)
            ins, outs, fwd = [], [], []
            for b, m in enumerate(blocks):
                if b > 0:
                    x = x.detach().requires_grad_(True)
                ins.append(x)
                x, t = timed(partial(_block_forward, m, x, sub, target, b == space.num_blocks - 1))
                fwd.append(t)
                outs.append(x)
            grad = None
            for b in reversed(range(space.num_blocks)):
                runs = outs[b].requires_grad and (grad is not None or outs[b].dim() == 0)
                _, t = timed(partial(_backward, outs[b], grad, runs))
                grad = ins[b].grad if b > 0 and ins[b].requires_grad else None
                if i > 0:  # the first subnet warms up
                    total[b] += fwd[b] + t
        return [t / samples for t in total]


def _block_forward(m: Any, x: Any, sub: Any, target: Any, last: bool) -> Any:
    y = m(x, sub)
    return m.loss(y, target) if last else y


def measure_profile(model: Any, seed: int = 0, repeats: int = 5) -> dict[str, Any]:
    """The forward latency of every candidate of ``model`` (a ``StageModel`` of the whole space) on one batch,
    on one intra-op thread, the median of ``repeats`` after a warm-up:
    ``{"unit": "s", "space": name, "batch_size": B, "blocks": {block: {candidate: seconds}}}``."""
    from naspipe.models import make_batch

    space = model.space
    x = make_batch(space, seed, 0).input
    with intra_op_threads(1):  # as every stage process and the reference run
        return _measure(model, space, x, repeats)


def _measure(model: Any, space: SearchSpace, x: Any, repeats: int) -> dict[str, Any]:
    import torch

    blocks: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for b, blk in enumerate(space.blocks):
            times: dict[str, float] = {}
            for c, cand in enumerate(blk.candidates):
                sub = [0] * space.num_blocks
                sub[b] = c
                one = _single_block(model, b)
                times[cand.name] = median_seconds(partial(one, x, sub), repeats)
            blocks[blk.name] = times
            x = _single_block(model, b)(x, [0] * space.num_blocks)
    return {"unit": "s", "space": space.name, "batch_size": space.batch_size, "blocks": blocks}


def _single_block(model: Any, b: int) -> Callable[[Any, list[int]], Any]:
    """Run block ``b`` alone: its module (fixed) or its chosen candidate's module in ``model.layers``."""
    blk = model.space.blocks[b]
    mod = model.layers[blk.name]

    def run(x: Any, subnet: list[int]) -> Any:
        return mod(x) if blk.fixed else mod[blk.candidates[subnet[b]].name](x)
    return run
