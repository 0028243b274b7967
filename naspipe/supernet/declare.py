"""The declaration API: a user's own supernet as ``Fixed`` and ``Choice`` blocks, data, loss and batch size.

Why it exists: a researcher arrives with their own ``nn.Module`` candidates, a stem and a head, their own
data and loss. These three classes are all they write; naspipe turns a ``Supernet`` into the plain-data
``SearchSpace`` the scheduler, simulator and partitioner read (``naspipe.resolve_space(supernet)``), and
builds the torch modules per stage from the factories (``naspipe.models``). A subnet is a plain dict
``{label: candidate}`` at every public boundary; ``to_dict`` / ``from_dict`` convert it to and from the
internal tuple of indices.

Declaration errors (duplicate labels or candidate names, a label that cannot name a torch module, a
``Choice`` without candidates, a factory that is not callable) raise ``SupernetError`` at once, with one
line naming the block and the candidate. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from naspipe.spaces.space import SpaceError

# common names nn.ModuleDict cannot hold (its attributes), refused here; the probe checks all of them
_RESERVED = {"training", "forward", "parameters", "modules", "children", "type", "cuda", "cpu", "to", "eval",
             "train", "state_dict", "load_state_dict", "keys", "items", "values", "update", "pop", "clear"}


class SupernetError(SpaceError):
    """A supernet declaration or its user code is unusable; the message is one line naming block and candidate."""


def _is_module(obj: Any) -> bool:
    """An nn.Module instance (passed where a factory belongs), told without importing torch."""
    return hasattr(obj, "forward") and hasattr(obj, "parameters") and not isinstance(obj, type)


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name or "." in name or name in _RESERVED or not name.isprintable():
        raise SupernetError(f"{what} {name!r} cannot name a torch module: use a non-empty name without '.' "
                            "that is not a torch attribute name")
    return name


@dataclass(frozen=True)
class Fixed:
    """A block every subnet uses (stem, norm, head): the shared layers the shared-layer policies govern."""

    label: str
    factory: Callable[[], Any]

    def __post_init__(self) -> None:
        _check_name(self.label, "label")
        if not callable(self.factory) or _is_module(self.factory):
            raise SupernetError(f"block {self.label!r}: the factory must be a zero-argument callable returning "
                                f"an nn.Module (e.g. lambda: {type(self.factory).__name__}(...)), got "
                                f"{type(self.factory).__name__}")

    @property
    def candidates(self) -> dict[str, Callable[[], Any]]:
        return {self.label: self.factory}

    @property
    def fixed(self) -> bool:
        return True


@dataclass(frozen=True)
class Choice:
    """A block with candidates ``{name: factory}``; each factory is a zero-argument callable returning an nn.Module."""

    label: str
    candidates: Mapping[str, Callable[[], Any]]

    def __post_init__(self) -> None:
        _check_name(self.label, "label")
        cands = self.candidates
        if isinstance(cands, (list, tuple)):  # (name, factory) pairs: duplicates are refused, not merged
            names = [p[0] if isinstance(p, (list, tuple)) and len(p) == 2 else None for p in cands]
            if None in names:
                raise SupernetError(f"block {self.label!r}: candidates must be a dict name -> factory "
                                    "or a list of (name, factory) pairs")
            dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
            if dup is not None:
                raise SupernetError(f"block {self.label!r}: duplicate candidate name {dup!r}")
            object.__setattr__(self, "candidates", dict(cands))
        if not isinstance(self.candidates, Mapping):
            raise SupernetError(f"block {self.label!r}: candidates must be a dict name -> factory")
        if not self.candidates:
            raise SupernetError(f"block {self.label!r}: a Choice needs at least one candidate")
        for name, f in self.candidates.items():
            _check_name(name, f"block {self.label!r}: candidate")
            if not callable(f) or _is_module(f):
                raise SupernetError(f"block {self.label!r}, candidate {name!r}: the factory must be a "
                                    f"zero-argument callable returning an nn.Module (e.g. lambda: "
                                    f"{type(f).__name__}(...)), got {type(f).__name__}")
        object.__setattr__(self, "candidates", dict(self.candidates))

    @property
    def fixed(self) -> bool:
        return False


@dataclass(frozen=True)
class Supernet:
    """A user's supernet: blocks in order, data, loss, batch size.

    ``data(j, generator)`` returns training batch ``j`` as ``(input, target)`` and draws randomness only
    from ``generator`` (naspipe seeds it from the run's seed and ``j``); or a map-style
    ``torch.utils.data.Dataset`` (batch ``j``'s indices are drawn from that generator). ``loss(output,
    target)`` returns a scalar tensor. ``heldout``: the evaluation source for search and reports, a function
    ``(i, generator)`` or a Dataset (default: ``data`` with generators of their own); ``heldout_batches``
    of them are used (default: all of a held-out Dataset, else 8). ``accuracy(output, target) -> float``
    (default: argmax accuracy for class targets).
    ``init(module, generator)``: optional, overwrites a freshly built candidate's weights; by default each
    factory's own initialisation runs under torch's random state seeded from (seed, block, candidate).
    ``costs``: a profile (``naspipe profile``) as a dict or the path of its JSON file. ``seed_domain``
    names the random streams of the batches (``data-<domain>``, ``heldout-<domain>``; the presets keep theirs).
    """

    blocks: Sequence[Fixed | Choice]
    data: Any
    loss: Callable[[Any, Any], Any]
    batch_size: int
    name: str | None = None
    heldout: Any = None
    heldout_batches: int | None = None
    accuracy: Callable[[Any, Any], float] | None = None
    init: Callable[[Any, Any], None] | None = None
    costs: Any = None
    seed_domain: str = "user"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        blocks = tuple(self.blocks) if isinstance(self.blocks, (list, tuple)) else None
        if not blocks:
            raise SupernetError("Supernet needs a non-empty list of Fixed and Choice blocks")
        seen: set[str] = set()
        for b in blocks:
            if not isinstance(b, (Fixed, Choice)):
                raise SupernetError(f"Supernet blocks must be naspipe.Fixed or naspipe.Choice, got {type(b).__name__}")
            if b.label in seen:
                raise SupernetError(f"duplicate label {b.label!r}: every block needs its own label")
            seen.add(b.label)
        object.__setattr__(self, "blocks", blocks)
        # each block's names and factories in order, once: a lookup per built candidate must not copy a block
        # of thousands of candidates (that made building a block quadratic in its size)
        object.__setattr__(self, "_names", tuple(tuple(b.candidates) for b in blocks))
        object.__setattr__(self, "_factories", tuple(tuple(b.candidates.values()) for b in blocks))
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise SupernetError(f"batch_size must be a whole number >= 1, got {self.batch_size!r}")
        if not callable(self.data) and not _is_dataset(self.data):
            raise SupernetError("data must be a function (j, generator) -> (input, target) or a map-style Dataset")
        if not callable(self.loss):
            raise SupernetError("loss must be a function (output, target) -> scalar tensor")
        # a name may hold ':' (``module:function``, the name the command line gives the same supernet)
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()
                                      or not self.name.isprintable()):
            raise SupernetError(f"name must be a non-empty printable string, got {self.name!r}")
        if self.name is not None and _is_preset(self.name):
            raise SupernetError(f"name {self.name!r} is a preset's; choose another name for your supernet")
        n = self.heldout_batches
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise SupernetError(f"heldout_batches must be a whole number >= 1, got {n!r}")

    def with_costs(self, costs: Any) -> Supernet:
        """The same supernet with a cost profile (``naspipe.measure_costs`` or the path of its JSON file)."""
        import dataclasses

        return dataclasses.replace(self, costs=costs)

    # ---- structure -------------------------------------------------------------------------------
    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(b.label for b in self.blocks)

    def candidate_names(self, block: int) -> tuple[str, ...]:
        return self._names[block]  # type: ignore[attr-defined]

    def factory(self, block: int, choice: int) -> Callable[[], Any]:
        return self._factories[block][choice]  # type: ignore[attr-defined]

    def seed_choice(self, block: int, choice: int) -> int:
        """The candidate index whose seed builds candidate ``choice`` of ``block``: itself (a few-shot supernet's
        copy is built as the candidate it copies, ``naspipe.supernet.copied``)."""
        return choice

    # ---- subnets as label dicts ------------------------------------------------------------------------
    def to_dict(self, subnet: Sequence[int]) -> dict[str, str]:
        """``{label: candidate name}`` of the choice blocks (fixed blocks are in every subnet)."""
        return subnet_to_dict(self.labels, [self.candidate_names(i) for i in range(len(self.blocks))],
                              [b.fixed for b in self.blocks], subnet)

    def from_dict(self, subnet: Mapping[str, str]) -> tuple[int, ...]:
        """The tuple of candidate indices of ``{label: candidate name}`` (every choice block named once)."""
        return subnet_from_dict(self.labels, [self.candidate_names(i) for i in range(len(self.blocks))],
                                [b.fixed for b in self.blocks], subnet)


def _is_preset(name: str) -> bool:
    from naspipe.spaces.space import preset

    try:
        preset(name)
    except SpaceError:
        return False
    return True


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__") and not callable(obj)


def subnet_to_dict(labels: Sequence[str], names: Sequence[Sequence[str]], fixed: Sequence[bool],
                   subnet: Sequence[int]) -> dict[str, str]:
    if len(subnet) != len(labels):
        raise SupernetError(f"subnet has {len(subnet)} choices, the supernet has {len(labels)} blocks")
    return {lab: names[i][int(subnet[i])] for i, lab in enumerate(labels) if not fixed[i]}


def subnet_from_dict(labels: Sequence[str], names: Sequence[Sequence[str]], fixed: Sequence[bool],
                     subnet: Mapping[str, str]) -> tuple[int, ...]:
    if not isinstance(subnet, Mapping):
        raise SupernetError(f"a subnet is a dict {{label: candidate}}, got {type(subnet).__name__}")
    unknown = set(subnet) - set(labels)
    if unknown:
        raise SupernetError(f"subnet names unknown label(s) {sorted(unknown)}; labels: {', '.join(labels)}")
    out = []
    for i, lab in enumerate(labels):
        if fixed[i]:
            if lab in subnet and subnet[lab] != names[i][0]:
                raise SupernetError(f"block {lab!r} is fixed; its only candidate is {names[i][0]!r}")
            out.append(0)
            continue
        if lab not in subnet:
            raise SupernetError(f"subnet lacks block {lab!r} (choose one of {', '.join(names[i])})")
        if subnet[lab] not in names[i]:
            raise SupernetError(f"block {lab!r} has no candidate {subnet[lab]!r}; choose one of {', '.join(names[i])}")
        out.append(list(names[i]).index(subnet[lab]))
    return tuple(out)
