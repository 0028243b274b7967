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
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from naspipe.space import SearchSpace, resolve_space


def measure_costs(space: Any, device: str = "cpu", repeats: int = 5, threads: int = 1,
                  seed: int = 0) -> dict[str, Any]:
    """``{"candidates": {label: {name: {fwd, bwd, bwd_input_share, param_bytes, act_bytes}}},
    "message_bytes": ..., ...}``; ``bwd_input_share``: the median input-gradient-only backward (the split
    backward's ``B``) over the median full backward, which the simulator's ``csp-bw`` splits ``bwd`` by."""
    import torch

    from naspipe import messages
    from naspipe.models import build_stage, input_of, make_batch, target_of
    from naspipe.shared import SharedLayers
    from naspipe.supernet.load import without_costs

    sp: SearchSpace = resolve_space(without_costs(space))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA device")
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    try:
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

                    sync()
                    t0 = time.perf_counter()
                    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                        y = mod(xin)
                        res = stage.loss(y, target) if b == last else y
                    sync()
                    t1 = time.perf_counter()
                    if messages.requires_grad(res):
                        _backward_ones(res)
                    sync()
                    t2 = time.perf_counter()
                    if r:  # the first run warms up
                        fwd.append(t1 - t0)
                        bwd.append(t2 - t1)
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
    finally:
        torch.set_num_threads(old)


def _input_backward(mod: Any, stage: Any, x: Any, target: Any, last: bool, sync: Any) -> float:
    """Seconds of the split backward's ``B`` on a fresh forward: the input gradient alone
    (``torch.autograd.grad``, no weight-gradient kernel); 0 where the input takes no gradient (token ids)."""
    import torch

    from naspipe import messages

    xin = _fresh_input(x)
    wrt = [t for t in messages.leaves(xin) if t.requires_grad]
    if not wrt:
        return 0.0
    y = mod(xin)
    res = stage.loss(y, target) if last else y
    roots = [t for t in messages.leaves(res) if t.requires_grad]
    if not roots:
        return 0.0
    sync()
    t = time.perf_counter()
    torch.autograd.grad(roots, wrt, [torch.ones_like(r) for r in roots], allow_unused=True)
    sync()
    return time.perf_counter() - t


def _fresh_input(x: Any) -> Any:
    """A block's input cut from the graph, its floating tensors requiring grad (a tensor or a structured message)."""
    from naspipe import messages

    return messages.map_leaves(lambda t: t.detach().requires_grad_(t.is_floating_point()), x)


def _backward_ones(res: Any) -> None:
    """Backward from ``res`` (a scalar loss, a tensor or a structured message) seeded with ones."""
    import torch

    from naspipe import messages

    roots = [t for t in messages.leaves(res) if t.requires_grad]
    torch.autograd.backward(roots, [torch.ones_like(r) for r in roots])


def check_writable(path: str | Path) -> Path:
    """Refuse, before anything is measured, a profile path that cannot be written (a directory, a read-only
    or missing folder that cannot be made): OSError with one line."""
    p = Path(path)
    if p.is_dir():
        raise OSError(f"{str(p)!r} is a directory; give the profile's file name (e.g. {str(p / 'x.costs.json')!r})")
    up = next((q for q in p.parents if q.exists()), None)
    if up is not None and not up.is_dir():
        raise OSError(f"cannot write the profile {str(p)!r}: {str(up)!r} is a file, not a folder")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp"):
            pass
    except OSError as e:
        raise OSError(f"cannot write the profile {str(p)!r}: {e.strerror or e}") from None
    return p


def save_costs(costs: dict[str, Any], path: str | Path) -> Path:
    """Write ``costs`` to ``path`` atomically (a temporary file beside it, then renamed): a reader never sees
    half a profile, and a failed write leaves the previous one."""
    from naspipe.atomic import write_atomic

    p = check_writable(path)
    write_atomic(p, (json.dumps(costs, indent=1, sort_keys=True) + "\n").encode())
    return p
