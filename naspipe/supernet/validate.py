"""Refuse bad user code before any process starts: one forward of every candidate on one batch.

Why it exists: a factory that raises, candidates of one block whose outputs differ in shape, a loss
that is not a scalar or a ``data`` that is not deterministic would otherwise surface as a crash (or,
worse, a silent mismatch) inside a stage process minutes into a run. ``probe_supernet`` builds every
candidate exactly as a stage would, draws batch 0 twice, runs each candidate on the previous block's
output and the loss on the head's output, and raises ``SupernetError`` with one line naming the block
and the candidate. It runs once per supernet object in a process.
"""

from __future__ import annotations

from typing import Any

from naspipe.supernet.declare import Supernet, SupernetError

_PROBED: dict[int, Supernet] = {}


def probe_supernet(sn: Supernet, where: str = "") -> None:
    """Build and run every candidate once on batch 0; SupernetError (prefixed by ``where``) on bad user code."""
    if _PROBED.get(id(sn)) is sn:
        return
    try:
        _probe(sn)
    except SupernetError as e:
        raise SupernetError(f"{where}{e}") from None
    _PROBED[id(sn)] = sn


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a, b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _probe(sn: Supernet) -> None:
    import torch

    from naspipe.seeding import hashed_generator
    from naspipe.supernet.build import build_candidate, draw_batch

    def draw() -> tuple[Any, Any]:
        try:
            return draw_batch(sn.data, sn.batch_size, hashed_generator("data-user", 0, 0), 0)
        except SupernetError:
            raise
        except Exception as e:  # noqa: BLE001
            raise SupernetError(f"data raised {type(e).__name__} drawing batch 0: {_line(e)}") from None

    holder = torch.nn.ModuleDict()
    for blk in sn.blocks:  # names nn.ModuleDict cannot hold (its own attributes)
        for what, name in (("label", blk.label), *((f"block {blk.label!r}: candidate", n) for n in blk.candidates)):
            if hasattr(holder, name):
                raise SupernetError(f"{what} {name!r} cannot name a torch module: it is an attribute of "
                                    "nn.ModuleDict; choose another name")
    x, target = draw()
    x2, target2 = draw()
    if not (_same(x, x2) and _same(target, target2)):
        raise SupernetError("data is not deterministic: batch 0 drawn twice differs; draw randomness only from "
                            "the torch.Generator naspipe passes in")
    with torch.no_grad():
        for b, blk in enumerate(sn.blocks):
            outs = []
            for c, name in enumerate(blk.candidates):
                mod = build_candidate(sn, b, c, 0)
                try:
                    out = mod(x)
                except Exception as e:  # noqa: BLE001
                    raise SupernetError(f"block {blk.label!r}, candidate {name!r}: forward on the previous block's "
                                        f"output {tuple(x.shape)} raised {type(e).__name__}: {_line(e)}") from None
                if not isinstance(out, torch.Tensor):
                    raise SupernetError(f"block {blk.label!r}, candidate {name!r}: forward returned "
                                        f"{type(out).__name__}, not one tensor")
                outs.append((name, out))
            first_name, first = outs[0]
            for name, out in outs[1:]:
                if out.shape != first.shape or out.dtype != first.dtype:
                    raise SupernetError(f"block {blk.label!r}: candidates {first_name!r} and {name!r} give outputs "
                                        f"{tuple(first.shape)} {first.dtype} and {tuple(out.shape)} {out.dtype}; every "
                                        "candidate of a block must give the same shape")
            x = first
    try:
        loss = sn.loss(x, target)
    except Exception as e:  # noqa: BLE001
        raise SupernetError(f"loss raised {type(e).__name__} on the head's output {tuple(x.shape)}: {_line(e)}") \
            from None
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.is_floating_point():
        scalar = isinstance(loss, torch.Tensor) and loss.dim() == 0
        got = f"a scalar of dtype {loss.dtype}" if scalar else tuple(loss.shape) \
            if isinstance(loss, torch.Tensor) else type(loss).__name__
        fix = "compute it in floating point" if scalar else "reduce it, e.g. with .mean()"
        raise SupernetError(f"loss must return a scalar float tensor, got {got} (last block "
                            f"{sn.blocks[-1].label!r}); {fix}")


def _line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ""
