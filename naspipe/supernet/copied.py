"""The supernet behind a few-shot space: its base's, with every copied block's candidates repeated K times.

Why it exists: a few-shot space (``naspipe.spaces.few_shot``) is plain data; the stage builder, the probes and the
data pipeline reach its torch side through ``naspipe.supernet.load.supernet_of``, which answers here. Copy ``k`` of
candidate ``c`` is the base's factory of ``c`` under ``c``'s seed (``seed_choice``), so every copy starts from the
very weights candidate ``c`` starts from in the one-shot supernet: the warm-up trains copy 0 exactly as a one-shot
run trains ``c``. Data, loss, held-out set and initialisation are the base's. Works for the presets, JSON spaces
and a user's own ``naspipe.Supernet`` alike. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from naspipe.supernet.declare import Choice, Supernet

_CACHE: dict[int, tuple[Any, Supernet]] = {}  # id(space) -> (space, supernet), as naspipe.supernet.load's presets


@dataclass(frozen=True)
class CopiedSupernet(Supernet):
    """A supernet whose block ``b`` holds ``copies[b]`` consecutive copies of each of its base's candidates."""

    copies: tuple[int, ...] = ()

    def seed_choice(self, block: int, choice: int) -> int:
        return choice // self.copies[block]


def copied_supernet(space: Any, base: Supernet) -> Supernet:
    """The supernet of few-shot space ``space`` whose base space's supernet is ``base`` (built once per space
    object and process)."""
    hit = _CACHE.get(id(space))
    if hit is not None and hit[0] is space:
        return hit[1]
    copies = tuple(space.copied(b) for b in range(space.num_blocks))
    blocks = []
    for b, blk in enumerate(base.blocks):
        if copies[b] == 1:
            blocks.append(blk)
            continue
        names = space.blocks[b].candidates
        blocks.append(Choice(blk.label, [(names[c * copies[b] + k].name, base.factory(b, c))
                                         for c in range(len(base.candidate_names(b))) for k in range(copies[b])]))
    kept = {f.name: getattr(base, f.name) for f in fields(Supernet) if f.name != "blocks"}
    sn = CopiedSupernet(blocks=blocks, copies=copies, **kept)
    if len(_CACHE) >= 64:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(space)] = (space, sn)
    return sn
