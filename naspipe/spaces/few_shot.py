"""Few-shot supernets as plain data: one supernet in which every other choice block holds K copies of each candidate.

Why it exists: few-shot NAS (Zhao et al., ICML 2021) splits a supernet on one choice block's K candidates into K
sub-supernets that share nothing else, each warm-started from the one-shot weights after a warm-up, and scores each
architecture with its own sub-supernet. naspipe trains the K sub-supernets as ONE ordinary supernet, the *expanded
space*: the split block is unchanged; every other choice block with C candidates holds C * K, candidate ``c * K + k``
being copy ``k`` of candidate ``c`` (named ``<name>@<k>``, built by candidate ``c``'s factory under candidate ``c``'s
seed, so every copy starts from the same weights); fixed blocks (stem, head) stay shared by all sub-supernets.

Subnet ``j`` of the run, architecture ``a`` of the base space, uses copy 0 of every candidate while ``j < warmup``
(the one-shot warm-up) and copy ``a[split]`` from then on (``FewShotSpace.expand``). At the boundary (before subnet
``warmup`` trains) every copy ``k > 0`` takes copy 0's weights and optimizer state (``naspipe.models.warm_start``).
The scheduler, the simulator and the runtime see a plain run on the expanded space, so every exact policy stays
bit-identical to the sequential reference; a ``FewShotSpace`` has its base's name, and a run's identity records the
base space and the split (``naspipe.runfolder.runs.identity``). No torch here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from naspipe.spaces.space import Block, SearchSpace, SpaceError, Subnet

COPY_MARK = "@"  # candidate name of copy k of candidate c: "<c>@<k>"


class FewShotError(SpaceError):
    """A few-shot split that cannot be made (unknown, fixed or one-candidate block, a bad warm-up); one line."""


@dataclass(frozen=True)
class FewShot:
    """The split: block index ``block`` (label ``label``) with ``copies`` candidates; ``warmup`` one-shot subnets."""

    block: int
    label: str
    copies: int
    warmup: int

    def describe(self) -> dict[str, Any]:
        """JSON-ready, as a run records it (``run.json``'s identity, the checkpoint fingerprint)."""
        return {"block": self.label, "copies": self.copies, "warmup": self.warmup}


@dataclass(frozen=True)
class FewShotSpace(SearchSpace):
    """The expanded space of ``base`` split by ``few_shot`` (see the module docstring); named as its base."""

    base: SearchSpace | None = None
    few_shot: FewShot | None = None

    def copied(self, block: int) -> int:
        """How many copies block ``block`` holds of each base candidate (1: the split block and fixed blocks)."""
        fs = self.few_shot
        assert fs is not None and self.base is not None
        return 1 if block == fs.block or self.base.blocks[block].fixed else fs.copies

    def base_choice(self, block: int, choice: int) -> int:
        """The base candidate that expanded candidate ``choice`` of ``block`` is a copy of."""
        return choice // self.copied(block)

    def expand(self, j: int, subnet: Sequence[int]) -> Subnet:
        """Subnet ``j`` of a run, architecture ``subnet`` of the base space, in the expanded space: copy 0 while
        ``j < warmup``, then copy ``subnet[split]`` of every other choice block's candidate."""
        fs = self.few_shot
        assert fs is not None
        copy = 0 if j < fs.warmup else int(subnet[fs.block])
        return self.trained(subnet, copy)

    def trained(self, subnet: Sequence[int], copy: int) -> Subnet:
        """Base architecture ``subnet`` on copy ``copy`` of every copied block."""
        return tuple(int(c) * self.copied(b) + (copy if self.copied(b) > 1 else 0) for b, c in enumerate(subnet))

    def scored(self, subnet: Sequence[int]) -> Subnet:
        """Base architecture ``subnet`` as it is scored after training: on its own sub-supernet."""
        fs = self.few_shot
        assert fs is not None
        return self.trained(subnet, int(subnet[fs.block]))

    def collapse(self, subnet: Sequence[int]) -> Subnet:
        """The base architecture of an expanded subnet (which copies it used is dropped)."""
        return tuple(self.base_choice(b, int(c)) for b, c in enumerate(subnet))


def base_of(space: SearchSpace) -> SearchSpace:
    """The base space of a few-shot space; any other space as it is."""
    base = getattr(space, "base", None)
    return base if isinstance(space, FewShotSpace) and base is not None else space


def few_shot_of(space: SearchSpace) -> FewShot | None:
    """The split of a few-shot space (None for any other space)."""
    return space.few_shot if isinstance(space, FewShotSpace) else None


def resolve_block(space: SearchSpace, block: str | int) -> int:
    """The index of the choice block ``block`` (its name, or its index as a number or digits) to split on;
    FewShotError (one line) for an unknown block, a fixed block or a block of one candidate."""
    names = [b.name for b in space.blocks]
    choices = ", ".join(space.blocks[i].name for i in space.choice_blocks if space.blocks[i].k > 1)
    if isinstance(block, bool):
        raise FewShotError(f"few-shot block must be a block name or index, got {block!r}")
    if isinstance(block, str) and block in names:
        index = names.index(block)
    elif isinstance(block, int) or (isinstance(block, str) and block.strip().isdigit()):
        index = int(block)
        if not 0 <= index < len(names):
            raise FewShotError(f"few-shot block {block!r}: space {space.name!r} has blocks 0..{len(names) - 1}; "
                               f"split one of its choice blocks: {choices}")
    else:
        raise FewShotError(f"few-shot block {block!r} is not a block of space {space.name!r}; split one of its "
                           f"choice blocks: {choices}")
    blk = space.blocks[index]
    if blk.fixed:
        raise FewShotError(f"few-shot block {blk.name!r} is a fixed block (used by every subnet: nothing to split); "
                           f"split a choice block: {choices}")
    if blk.k < 2:
        raise FewShotError(f"few-shot block {blk.name!r} has one candidate (nothing to split); split a choice block "
                           f"of several: {choices}")
    return index


def few_shot_space(base: SearchSpace, block: str | int, warmup: int, subnets: int) -> FewShotSpace:
    """The expanded space of ``base`` split on ``block`` after ``warmup`` of the run's ``subnets`` subnets;
    FewShotError (one line) for a block that cannot be split or a warm-up outside ``[0, subnets)``."""
    if isinstance(base, FewShotSpace):
        raise FewShotError(f"space {base.name!r} is already split (few-shot on block {base.few_shot.label!r})")
    index = resolve_block(base, block)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < subnets:
        raise FewShotError(f"few-shot warm-up must be a whole number of subnets from 0 to {subnets - 1} (fewer than "
                           f"the {subnets} subnets of the run, which count it), got {warmup!r}")
    k = base.blocks[index].k
    blocks = []
    for b, blk in enumerate(base.blocks):
        if blk.fixed or b == index:
            blocks.append(blk)
            continue
        cands = tuple(dataclasses.replace(c, name=f"{c.name}{COPY_MARK}{copy}") for c in blk.candidates
                      for copy in range(k))
        blocks.append(Block(blk.name, cands, fixed=False, role=blk.role))
    return FewShotSpace(name=base.name, blocks=tuple(blocks), model=base.model, batch_size=base.batch_size,
                        message_bytes=base.message_bytes, base=base,
                        few_shot=FewShot(index, base.blocks[index].name, k, int(warmup)))


def recorded_split(record: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """``(block label, warmup)`` of a run's recorded ``few_shot`` (``FewShot.describe``), None when it has none."""
    if not record:
        return None
    if not isinstance(record, Mapping) or not isinstance(record.get("block"), str) \
            or not isinstance(record.get("warmup"), int):
        raise FewShotError(f"a run's few_shot record must hold 'block' and 'warmup', got {record!r}")
    return record["block"], int(record["warmup"])
