"""The torch side of a supernet (``naspipe.Supernet``): a candidate built from its factory, a batch drawn.

Why it exists: every candidate of every supernet (the presets included) is built here, by the stage builder
(``naspipe.models.user.SupernetBuilder``) and by the probe of user code (``naspipe.supernet.validate``) alike.
Weights depend on the run's seed, the block and the candidate alone: each factory runs under torch's
random state seeded from those three, so
every partition and the reference build the same tensors from the user's own default initialisation.
Batch ``j`` is ``data(j, generator)`` with the generator seeded from the run's seed and ``j``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from naspipe.supernet.declare import Supernet, SupernetError
from naspipe.supernet.seeding import GLOBAL_RNG, candidate_generator
from naspipe.supernet.usercode import first_line, user_errors


def init_seed(seed: int, block: int, choice: int) -> int:
    """The torch seed a factory runs under (a function of the run's seed, the block and the candidate)."""
    return int(torch.randint(0, 2**62, (1,), generator=candidate_generator(seed, block, choice)))


def seed_all(seed: int) -> None:
    """``torch.manual_seed(seed)`` without its cost where no accelerator is present: there it queues a lazy seed
    of every accelerator kind with a formatted stack (about 1 ms each), which made building a block of
    thousands of candidates take seconds per thousand for nothing. CPU weights are the same either way."""
    if torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def build_candidate(sn: Supernet, block: int, choice: int, seed: int) -> nn.Module:
    """Call the factory under the seeded random state (then ``sn.init``, if any); SupernetError names it."""
    label, name = sn.blocks[block].label, sn.candidate_names(block)[choice]
    seeded = sn.seed_choice(block, choice)  # (a few-shot copy: the candidate it copies)
    try:
        with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
            seed_all(init_seed(seed, block, seeded))
            mod = sn.factory(block, choice)()
            if isinstance(mod, nn.Module) and sn.init is not None:
                sn.init(mod, candidate_generator(seed, block, seeded))
    except user_errors() as e:  # noqa: BLE001 - user code: one line naming block and candidate
        raise SupernetError(f"block {label!r}, candidate {name!r}: the factory raised {type(e).__name__}: "
                            f"{_line(e)}") from None
    if not isinstance(mod, nn.Module):
        raise SupernetError(f"block {label!r}, candidate {name!r}: the factory returned {type(mod).__name__}, "
                            "not an nn.Module")
    return mod


def _line(e: BaseException) -> str:
    return first_line(e)


def draw_batch(src: Any, batch_size: int, g: torch.Generator, j: int | None) -> tuple[Tensor, Any]:
    if callable(src):
        batch = src(j, g)
    else:  # a map-style Dataset: batch j's indices come from the generator
        from torch.utils.data import default_collate

        idx = torch.randperm(len(src), generator=g)[:batch_size].tolist()
        batch = default_collate([src[i] for i in idx])
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise SupernetError(f"data must return (input, target); got {type(batch).__name__}")
    x, y = batch
    if not isinstance(x, Tensor):
        raise SupernetError(f"data's input must be one tensor (the message between stages), got {type(x).__name__}")
    return x, y
