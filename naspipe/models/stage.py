"""One pipeline stage of a supernet: the blocks it owns, every candidate of them, and one forward.

``build_stage(space, blocks, seed, shared)`` builds only ``blocks``; the whole model is
``build_stage(space, range(space.num_blocks), ...)``. Weights depend on ``(seed, block, candidate)``
alone and parameter names are global (``"<block>.<candidate>.<param>"`` for choice blocks,
``"<block>.<param>"`` for fixed ones), so any partition yields the same tensors under the same names.

The message between blocks (and stages) is one tensor or a tuple, list or dict of tensors
(``naspipe.supernet.messages``):
a block maps it to the next block's input. The first block takes the batch's input tensor, the head block returns
what the loss takes. Every supernet, preset or the user's, is
a ``naspipe.Supernet``; its candidates are built by ``naspipe.models.user.SupernetBuilder``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, SpaceError
from naspipe.supernet import messages

USER_KIND = "supernet"  # a naspipe.Supernet declared by the user; the presets' kinds: naspipe.models.presets
PRESET_KINDS = ("transformer", "cnn", "cnn1d", "mlp")


def model_kind(space: SearchSpace) -> str:
    """The space's ``model.kind`` if naspipe can build it, else a SpaceError (a refusal) saying what is possible."""
    kind = space.model.get("kind", "cost-only")
    if kind == USER_KIND:
        return kind
    if kind not in PRESET_KINDS:
        raise SpaceError(f"space {space.name!r} has model kind {kind!r}, which has no torch model; "
                         f"trainable kinds: {', '.join(PRESET_KINDS)} (e.g. tiny-transformer, digits-cnn) "
                         "or your own naspipe.Supernet (--space module:function)")
    return kind


def _key(name: str, what: str) -> str:
    if not name or "." in name:
        raise ValueError(f"{what} name {name!r} cannot name torch modules: use a non-empty name without '.'")
    return name


class StageModel(nn.Module):
    """The blocks ``blocks`` of ``space`` with all their candidates; ``forward`` runs one subnet."""

    def __init__(self, space: SearchSpace, blocks: range, seed: int, shared: SharedLayers):
        super().__init__()
        self.space = space
        self.blocks = blocks
        self.seed = int(seed)
        self.shared = shared
        model_kind(space)
        from naspipe.models.user import SupernetBuilder

        self.family = SupernetBuilder(space)
        self._capture: list[Tensor] | None = None  # set only inside ``capturing``
        self.layers = nn.ModuleDict()
        # per block: (index, fixed, module or {choice: module}, [(global name, local name)] for fixed)
        self._plan: list[tuple[int, bool, nn.Module | list[nn.Module], list[tuple[str, str]]]] = []
        for b in blocks:
            if not 0 <= b < space.num_blocks:
                raise ValueError(f"block {b} is outside space {space.name!r} (0..{space.num_blocks - 1})")
            blk = space.blocks[b]
            bkey = _key(blk.name, "block")
            try:
                if blk.fixed:
                    mod = self.family.make(space, b, 0, self.seed)
                    self.layers[bkey] = mod
                    names = [(f"{bkey}.{n}", n) for n, _ in mod.named_parameters()]
                    self._plan.append((b, True, mod, names))
                else:
                    cands = nn.ModuleDict()
                    mods = []
                    for c, cand in enumerate(blk.candidates):
                        ckey = _key(cand.name, f"block {blk.name!r}: candidate")
                        if ckey in cands:
                            raise ValueError(f"block {blk.name!r}: duplicate candidate name {ckey!r}")
                        mod = self.family.make(space, b, c, self.seed)
                        cands[ckey] = mod
                        mods.append(mod)
                    self.layers[bkey] = cands
                    self._plan.append((b, False, mods, []))
            except KeyError as e:  # ModuleDict refuses names that clash with its attributes
                raise ValueError(f"block {blk.name!r}: {e.args[0]}") from None
        if not shared.trains_shared:
            for p in self.fixed_named_parameters().values():
                p.requires_grad_(False)

    # ---- running ------------------------------------------------------------------------------
    @property
    def holds_input(self) -> bool:
        """True on the stage that takes the batch input (it owns block 0)."""
        return 0 in self.blocks

    @property
    def holds_head(self) -> bool:
        """True on the stage that returns logits (it owns the last block)."""
        return self.space.num_blocks - 1 in self.blocks

    def forward(self, x: Any, subnet: Sequence[int],
                fixed_params: Mapping[str, Tensor] | None = None, capture: list[Any] | None = None) -> Any:
        """Run ``subnet`` (one choice per block of the whole space) through this stage's blocks.

        ``fixed_params`` (global name -> tensor, all of this stage's fixed-block parameters) replaces the
        fixed blocks' own parameters for this call, e.g. an older version under ``delayed:D``.
        ``capture``: a list that receives each block's output tensor, in block order (the split backward's
        per-block weight gradients start from them); when None, the list set by ``capturing`` is used, if any.
        Capturing changes nothing in the computation.
        """
        if capture is None:
            capture = self._capture
        if len(subnet) != self.space.num_blocks:
            raise ValueError(f"subnet has {len(subnet)} choices, space {self.space.name!r} has "
                             f"{self.space.num_blocks} blocks")
        for b, fixed, mod, names in self._plan:
            if not fixed:
                x = mod[subnet[b]](x)  # type: ignore[index]
            elif fixed_params is None:
                x = mod(x)  # type: ignore[operator]
            else:
                try:
                    local = {ln: fixed_params[gn] for gn, ln in names}
                except KeyError as e:
                    raise KeyError(f"fixed_params lacks {e.args[0]!r}") from None
                x = functional_call(mod, local, (x,))  # type: ignore[arg-type]
            x = messages.at_boundary(x)  # one layout after every block, forward and backward (in messages)
            if capture is not None:
                capture.append(x)
        return x

    @contextmanager
    def capturing(self, capture: list[Tensor]) -> Iterator[list[Tensor]]:
        """Within the block, every ``forward`` call that passes no ``capture`` appends block outputs to
        ``capture`` (for callers that reach ``forward`` through another object, e.g. an update rule)."""
        prev, self._capture = self._capture, capture
        try:
            yield capture
        finally:
            self._capture = prev

    def loss(self, out: Tensor, target: Tensor) -> Tensor:
        """Mean cross-entropy of the logits ``out`` (only meaningful on the stage holding the head)."""
        return self.family.loss(out, target)

    def accuracy(self, out: Tensor, target: Tensor) -> float:
        return self.family.accuracy(out, target)

    # ---- parameters ---------------------------------------------------------------------------
    def candidate(self, block: int, choice: int) -> nn.Module:
        """The module of candidate ``choice`` of ``block`` (a fixed block's only choice is 0)."""
        if block not in self.blocks:
            raise ValueError(f"block {block} is not on this stage (blocks {self.blocks.start}..{self.blocks.stop - 1})")
        _, fixed, mod, _ = self._plan[block - self.blocks.start]
        if fixed:
            if choice != 0:
                raise ValueError(f"block {block} is fixed: its only choice is 0, got {choice}")
            return mod  # type: ignore[return-value]
        return mod[choice]  # type: ignore[index]

    def candidate_parameters(self, block: int, choice: int) -> list[nn.Parameter]:
        return list(self.candidate(block, choice).parameters())

    def subnet_parameters(self, subnet: Sequence[int]) -> list[nn.Parameter]:
        """Parameters of the choice-block candidates ``subnet`` uses on this stage (no fixed blocks)."""
        return [p for b, fixed, _, _ in self._plan if not fixed for p in self.candidate_parameters(b, subnet[b])]

    def fixed_named_parameters(self) -> dict[str, nn.Parameter]:
        """Global name -> parameter, for the fixed blocks on this stage."""
        out: dict[str, nn.Parameter] = {}
        for _, fixed, mod, names in self._plan:
            if fixed:
                params = dict(mod.named_parameters())  # type: ignore[union-attr]
                out.update({gn: params[ln] for gn, ln in names})
        return out

    def global_named_parameters(self) -> dict[str, nn.Parameter]:
        """Every parameter of this stage under its partition-independent name, e.g. ``enc3.attn2.op.qkv.weight``."""
        return {global_name(n): p for n, p in self.named_parameters()}


def global_name(name: str) -> str:
    """The partition-independent name of a ``StageModel`` parameter (or ``state_dict`` entry) named ``name``."""
    return name.removeprefix("layers.")


def build_stage(space: SearchSpace, blocks: range, seed: int, shared: SharedLayers) -> StageModel:
    """Build (only) ``blocks`` of ``space``'s supernet; float32 on the CPU, no dropout."""
    if not isinstance(blocks, range) or blocks.step != 1 or len(blocks) == 0:
        raise ValueError(f"blocks must be a non-empty contiguous range, got {blocks!r}")
    with torch.no_grad():
        return StageModel(space, blocks, seed, shared)
