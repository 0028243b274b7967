"""The built-in supernets (``transformer``, ``cnn``, ``cnn1d``, ``mlp`` spaces) declared through ``naspipe.Supernet``.

Why it exists: there is one model path. A preset's space (plain data, ``naspipe.spaces.space``) names its family in
``model.kind``; ``declare(space)`` turns it into a ``Supernet`` of ``Fixed`` and ``Choice`` blocks whose
factories build that family's modules, exactly as a user declares their own. Presets keep their bits: their
``init`` overwrites each new candidate from the (seed, block, candidate) generator (``init_module``) and their
batches keep their random-stream domains (``seed_domain``).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

from naspipe.models import cnn, cnn1d, mlp, transformer
from naspipe.spaces.space import SearchSpace
from naspipe.supernet.declare import Choice, Fixed, Supernet
from naspipe.supernet.load import register_family
from naspipe.supernet.seeding import init_module

KINDS: dict[str, ModuleType] = {"transformer": transformer, "cnn": cnn, "cnn1d": cnn1d, "mlp": mlp}


def declare(space: SearchSpace) -> Supernet:
    """The Supernet of a built-in space (ValueError naming the field when its model is malformed)."""
    fam = KINDS[space.model["kind"]]
    fam.check(space)
    blocks: list[Fixed | Choice] = []
    for b, blk in enumerate(space.blocks):
        if blk.fixed:
            blocks.append(Fixed(blk.name, partial(fam.fixed_block, space, b)))
        else:
            blocks.append(Choice(blk.name, [(c.name, partial(fam.candidate, space, b, c)) for c in blk.candidates]))
    return Supernet(blocks, data=partial(fam.batch, space), loss=fam.loss, batch_size=space.batch_size,
                    heldout=fam.heldout(space), accuracy=fam.accuracy, seed_domain=fam.DOMAIN,
                    init=partial(init_module, gain=fam.INIT_GAIN), meta={"preset": space.name})


for _kind in KINDS:  # naspipe.supernet.supernet_of declares a preset space through this
    register_family(_kind, declare)
