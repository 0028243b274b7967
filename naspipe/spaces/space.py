"""Search spaces as plain data: blocks, candidates, their costs, subnets; JSON load/validate; presets.

A supernet is an ordered list of blocks. A *choice* block holds K candidate ops; a *fixed* block
(embedding, norm, output head) has exactly one candidate and is used by every subnet. A subnet is a
tuple with one candidate index per block (0 for fixed blocks). Nothing here imports torch: the
scheduler, the simulator and the runtime all read the same objects.

Costs are per candidate and refer to one batch of ``space.batch_size`` samples: ``fwd`` and ``bwd``
seconds, ``bwd_input_share`` (the part of ``bwd`` that computes the input gradient, the rest being the
weight gradient, used by the split-backward policy), ``param_bytes`` and ``act_bytes`` (activation
bytes kept per sample for the backward).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.fileio import jsonfile

Subnet = tuple[int, ...]


class SpaceError(UserError):
    """A search-space description is malformed; the message says which field and what is allowed."""


class UnknownSpace(SpaceError):
    """``name`` is neither a preset nor a file nor what a registered resolver accepts (a space loaded from a JSON
    file, recorded by its name alone, is one)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name

    def __reduce__(self) -> tuple:  # (it crosses a pool's pipe: a worker that cannot resolve the space)
        return type(self), (self.name, str(self))


def replicas_error(batch_size: int, replicas: object) -> str | None:
    """Why ``replicas`` data-parallel replicas cannot train batches of ``batch_size`` samples, in one line (None:
    they can). The one statement of the rule: each replica computes an equal shard of every batch, so the
    replicas are a whole number >= 1 that divides the batch size. (``naspipe.runspec.spec.RunSpec`` validates its
    ``replicas`` with it; the simulator, the reference, training and the supernet probe ask it too.)"""
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        return f"replicas must be a whole number >= 1, got {replicas!r}"
    if batch_size % replicas:
        return f"replicas {replicas} must divide the batch size {batch_size} (each replica computes an equal shard)"
    return None


@dataclass(frozen=True)
class Candidate:
    name: str
    op: str = "linear"
    fwd: float = 1.0
    bwd: float = 2.0
    param_bytes: int = 0
    act_bytes: int = 0
    bwd_input_share: float = 0.5
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bwd_input(self) -> float:
        return self.bwd * self.bwd_input_share

    @property
    def bwd_weight(self) -> float:
        return self.bwd - self.bwd_input


@dataclass(frozen=True)
class Block:
    name: str
    candidates: tuple[Candidate, ...]
    fixed: bool = False
    role: str = ""  # free-form hint for model builders: "embed", "encoder", "decoder", "head", ...

    @property
    def k(self) -> int:
        return len(self.candidates)


@dataclass(frozen=True)
class SearchSpace:
    name: str
    blocks: tuple[Block, ...]
    model: Mapping[str, Any] = field(default_factory=dict)  # what the torch builder needs
    batch_size: int = 1
    message_bytes: int = 0  # bytes per sample of an activation (or gradient) at a stage boundary

    # ---- structure -------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def choice_blocks(self) -> tuple[int, ...]:
        return tuple(i for i, b in enumerate(self.blocks) if not b.fixed)

    @property
    def fixed_blocks(self) -> tuple[int, ...]:
        return tuple(i for i, b in enumerate(self.blocks) if b.fixed)

    def candidate(self, block: int, choice: int) -> Candidate:
        return self.blocks[block].candidates[choice]

    def validate_subnet(self, subnet: Sequence[int]) -> Subnet:
        if len(subnet) != self.num_blocks:
            raise SpaceError(f"subnet has {len(subnet)} choices, space {self.name!r} has {self.num_blocks} blocks")
        for i, (c, b) in enumerate(zip(subnet, self.blocks, strict=True)):
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < b.k:
                raise SpaceError(f"subnet choice {c!r} for block {i} ({b.name}) must be an integer in [0, {b.k})")
        return tuple(subnet)

    def subnet_dict(self, subnet: Sequence[int]) -> dict[str, str]:
        """A subnet as users write it: ``{block name: candidate name}`` for the choice blocks."""
        sub = self.validate_subnet(list(subnet))
        return {b.name: b.candidates[c].name for b, c in zip(self.blocks, sub, strict=True) if not b.fixed}

    def subnet_from_dict(self, labels: Mapping[str, str]) -> Subnet:
        """The index tuple of ``{block name: candidate name}`` (every choice block named once)."""
        if not isinstance(labels, Mapping):
            raise SpaceError(f"a subnet is a dict {{label: candidate}}, got {type(labels).__name__}")
        unknown = set(labels) - {b.name for b in self.blocks}
        if unknown:
            raise SpaceError(f"subnet names unknown label(s) {sorted(unknown)} of space {self.name!r}")
        out = []
        for b in self.blocks:
            names = [c.name for c in b.candidates]
            if b.fixed:
                if b.name in labels and labels[b.name] != names[0]:
                    raise SpaceError(f"block {b.name!r} is fixed; its only candidate is {names[0]!r}")
                out.append(0)
            elif b.name not in labels:
                raise SpaceError(f"subnet lacks block {b.name!r} (choose one of {', '.join(names)})")
            elif labels[b.name] not in names:
                raise SpaceError(f"block {b.name!r} has no candidate {labels[b.name]!r}; choose one of "
                                 f"{', '.join(names)}")
            else:
                out.append(names.index(labels[b.name]))
        return tuple(out)

    def subnet_cost(self, subnet: Subnet, blocks: Iterable[int] | None = None) -> dict[str, float]:
        """Summed costs of a subnet over ``blocks`` (all blocks by default)."""
        idx = range(self.num_blocks) if blocks is None else blocks
        out = {"fwd": 0.0, "bwd": 0.0, "bwd_input": 0.0, "bwd_weight": 0.0, "param_bytes": 0.0, "act_bytes": 0.0}
        for b in idx:
            c = self.candidate(b, subnet[b])
            out["fwd"] += c.fwd
            out["bwd"] += c.bwd
            out["bwd_input"] += c.bwd_input
            out["bwd_weight"] += c.bwd_weight
            out["param_bytes"] += c.param_bytes
            out["act_bytes"] += c.act_bytes
        return out

    def supernet_param_bytes(self, blocks: Iterable[int] | None = None) -> int:
        idx = range(self.num_blocks) if blocks is None else blocks
        return sum(c.param_bytes for b in idx for c in self.blocks[b].candidates)

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "batch_size": self.batch_size,
            "message_bytes": self.message_bytes,
            "model": dict(self.model),
            "blocks": [
                {
                    "name": b.name,
                    "fixed": b.fixed,
                    "role": b.role,
                    "candidates": [{**asdict(c), "args": dict(c.args)} for c in b.candidates],
                }
                for b in self.blocks
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    def digest(self) -> str:
        """sha256 of what decides a run's numbers: the space without its costs (``COST_FIELDS`` and
        ``message_bytes``), which only steer the schedule, the partition and the plans; so re-profiling a
        space does not change the identity of its runs (``naspipe.runfolder.runs``) or their checkpoints."""
        import hashlib

        d = self.to_dict()
        d.pop("message_bytes")
        for b in d["blocks"]:
            for c in b["candidates"]:
                for k in COST_FIELDS:
                    c.pop(k)
        return hashlib.sha256(json.dumps(d, indent=1, sort_keys=True).encode()).hexdigest()

    def structure_digest(self) -> str:
        """``digest()`` without the space's name and the model's address (``name``, ``source``: where a user's
        supernet is found, a notebook's name or ``module:function``): blocks, candidates, batch size and model
        kind. Two spaces that agree here are one space under two names (``naspipe.runfolder.runs`` compares runs by
        it)."""
        import hashlib

        d = json.loads(self.to_json())
        d.pop("name")
        d.pop("message_bytes")
        for k in ("name", "source"):
            d["model"].pop(k, None)
        for b in d["blocks"]:
            for c in b["candidates"]:
                for k in COST_FIELDS:
                    c.pop(k)
        return hashlib.sha256(json.dumps(d, indent=1, sort_keys=True).encode()).hexdigest()


# the per-candidate cost fields: measured or estimated, never part of what a run computes
COST_FIELDS = ("fwd", "bwd", "bwd_input_share", "param_bytes", "act_bytes")


# ---- validation ----------------------------------------------------------------------------------
_CAND_NUM = {"fwd": float, "bwd": float, "param_bytes": int, "act_bytes": int, "bwd_input_share": float}
# bounds of plausible costs: seconds per batch of one candidate, and bytes (larger values are corruption, and
# overflow the simulator's and the planner's sums to inf)
MAX_SECONDS = 1e6
MAX_BYTES = 2**50
_MOST = {"fwd": MAX_SECONDS, "bwd": MAX_SECONDS, "param_bytes": MAX_BYTES, "act_bytes": MAX_BYTES,
         "message_bytes": MAX_BYTES}


def _bounded(where: str, key: str, value: float) -> None:
    if key in _MOST and value > _MOST[key]:
        most = "2**50" if _MOST[key] == MAX_BYTES else f"{_MOST[key]:g}"
        raise SpaceError(f"{where}: field {key!r} must be at most {most}, got {value!r}")


def _num(where: str, key: str, value: Any, kind: type) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpaceError(f"{where}: field {key!r} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise SpaceError(f"{where}: field {key!r} must be a finite number >= 0, got {value!r}")
    if kind is int:
        if value != int(value):
            raise SpaceError(f"{where}: field {key!r} must be a whole number, got {value!r}")
        return int(value)
    return float(value)


def space_from_dict(data: Any, source: str = "space") -> SearchSpace:
    """Build and validate a SearchSpace from parsed JSON; every malformed field raises SpaceError."""
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: top level must be a JSON object with 'name' and 'blocks'")
    unknown = set(data) - {"name", "blocks", "model", "batch_size", "message_bytes"}
    if unknown:
        raise SpaceError(f"{source}: unknown field(s) {sorted(unknown)}; allowed: name, blocks, model, "
                         "batch_size, message_bytes")
    name = data.get("name", source)
    if not isinstance(name, str) or not name:
        raise SpaceError(f"{source}: field 'name' must be a non-empty string")
    blocks_raw = data.get("blocks")
    if not isinstance(blocks_raw, list) or not blocks_raw:
        raise SpaceError(f"{source}: field 'blocks' must be a non-empty list of blocks")
    model = data.get("model", {})
    if not isinstance(model, dict):
        raise SpaceError(f"{source}: field 'model' must be an object")
    batch_size = _num(source, "batch_size", data.get("batch_size", 1), int)
    if batch_size < 1:
        raise SpaceError(f"{source}: field 'batch_size' must be >= 1")
    message_bytes = _num(source, "message_bytes", data.get("message_bytes", 0), int)
    _bounded(source, "message_bytes", message_bytes)
    blocks: list[Block] = []
    names: set[str] = set()
    for i, braw in enumerate(blocks_raw):
        where = f"{source}: blocks[{i}]"
        if not isinstance(braw, dict):
            raise SpaceError(f"{where} must be an object with 'name' and 'candidates'")
        unknown = set(braw) - {"name", "candidates", "fixed", "role"}
        if unknown:
            raise SpaceError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: name, candidates, fixed, role")
        bname = braw.get("name", f"block{i}")
        if not isinstance(bname, str) or not bname:
            raise SpaceError(f"{where}: field 'name' must be a non-empty string")
        if bname in names:
            raise SpaceError(f"{where}: duplicate block name {bname!r}")
        names.add(bname)
        fixed = braw.get("fixed", False)
        if not isinstance(fixed, bool):
            raise SpaceError(f"{where}: field 'fixed' must be true or false")
        role = braw.get("role", "")
        if not isinstance(role, str):
            raise SpaceError(f"{where}: field 'role' must be a string")
        craw = braw.get("candidates")
        if not isinstance(craw, list) or not craw:
            raise SpaceError(f"{where}: field 'candidates' must be a non-empty list")
        if fixed and len(craw) != 1:
            raise SpaceError(f"{where}: a fixed block has exactly 1 candidate, got {len(craw)}")
        cands = []
        for k, c in enumerate(craw):
            cw = f"{where}.candidates[{k}]"
            if not isinstance(c, dict):
                raise SpaceError(f"{cw} must be an object")
            unknown = set(c) - {"name", "op", "args", *_CAND_NUM}
            if unknown:
                raise SpaceError(f"{cw}: unknown field(s) {sorted(unknown)}; allowed: name, op, args, "
                                 + ", ".join(_CAND_NUM))
            cname = c.get("name", f"c{k}")
            op = c.get("op", "linear")
            if not isinstance(cname, str) or not isinstance(op, str):
                raise SpaceError(f"{cw}: fields 'name' and 'op' must be strings")
            args = c.get("args", {})
            if not isinstance(args, dict):
                raise SpaceError(f"{cw}: field 'args' must be an object")
            nums = {key: _num(cw, key, c[key], kind) for key, kind in _CAND_NUM.items() if key in c}
            for key, v in nums.items():
                _bounded(cw, key, v)
            if nums.get("bwd_input_share", 0.5) > 1:
                raise SpaceError(f"{cw}: field 'bwd_input_share' must lie in [0, 1]")
            cands.append(Candidate(name=cname, op=op, args=args, **nums))
        blocks.append(Block(name=bname, candidates=tuple(cands), fixed=fixed, role=role))
    return SearchSpace(name=name, blocks=tuple(blocks), model=model, batch_size=batch_size,
                       message_bytes=message_bytes)


def load_space(path: str | Path) -> SearchSpace:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpaceError(f"cannot read space file {str(p)!r}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise SpaceError(f"{p.name}: not a UTF-8 text file (expected JSON)") from None
    data = load_json_text(text, p.name)
    return space_from_dict(data, source=p.name)


MAX_JSON_DEPTH = 32  # a space or sequence nests 5 levels; deeper is a mistake (and would recurse in Python)


def load_json_text(text: str, source: str) -> Any:
    """Parse JSON ``text`` (from file ``source``); SpaceError for malformed or too deeply nested JSON."""
    try:
        data = jsonfile.loads(text)
    except json.JSONDecodeError as e:
        raise SpaceError(f"{source}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except jsonfile.NestedTooDeeply:
        raise SpaceError(f"{source}: JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise SpaceError(f"{source}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return data


# ---- presets -------------------------------------------------------------------------------------
# NASPipe's evaluation shape: 24 encoder + 24 decoder choice blocks, fixed embedding and output head.
# Relative per-batch costs of the candidate families (ms at the reference batch on one accelerator);
# a backward costs about twice its forward. Attention is dearer with more heads, convolutions with
# wider kernels, the gated linear unit sits between them.
_HIDDEN = 1024
_SEQ = 128
_BATCH = 32
_OP_FAMILY: tuple[tuple[str, str, dict[str, Any], float, float], ...] = (
    # (name, op, args, fwd ms, params in units of hidden^2)
    ("attn4", "attention", {"heads": 4}, 1.10, 4.0),
    ("attn8", "attention", {"heads": 8}, 1.25, 4.0),
    ("attn16", "attention", {"heads": 16}, 1.45, 4.0),
    ("conv3", "conv", {"kernel": 3}, 0.70, 3.0),
    ("conv7", "conv", {"kernel": 7}, 0.85, 7.0),
    ("conv11", "conv", {"kernel": 11}, 1.00, 11.0),
    ("glu", "glu", {}, 0.90, 3.0),
    ("ffn", "ffn", {}, 0.80, 2.0),
)


def _naspipe_space(k: int) -> SearchSpace:
    act_bytes_per_sample = _SEQ * _HIDDEN * 4 * 3
    cands = []
    for i in range(k):
        name, op, args, fwd_ms, p_units = _OP_FAMILY[i % len(_OP_FAMILY)]
        variant = i // len(_OP_FAMILY)
        # variants of a family differ slightly (e.g. another hidden width), so K can exceed 8
        scale = 1.0 + 0.05 * variant
        cands.append(Candidate(
            name=f"{name}" if variant == 0 else f"{name}_v{variant}", op=op, args={**args, "variant": variant},
            fwd=round(fwd_ms * scale * 1e-3, 9), bwd=round(2 * fwd_ms * scale * 1e-3, 9),
            param_bytes=int(p_units * scale * _HIDDEN * _HIDDEN * 4),
            act_bytes=act_bytes_per_sample,
        ))
    cands_t = tuple(cands)
    blocks = [Block("embed", (Candidate("embed", "embedding", 0.3e-3, 0.6e-3, 32000 * _HIDDEN * 4,
                                       _SEQ * _HIDDEN * 4),), fixed=True, role="embed")]
    blocks += [Block(f"enc{i}", cands_t, role="encoder") for i in range(24)]
    blocks += [Block(f"dec{i}", cands_t, role="decoder") for i in range(24)]
    blocks.append(Block("head", (Candidate("head", "linear", 0.6e-3, 1.2e-3, 32000 * _HIDDEN * 4,
                                          _SEQ * 32000 * 4),), fixed=True, role="head"))
    return SearchSpace(name=f"naspipe-k{k}", blocks=tuple(blocks), batch_size=_BATCH,
                       message_bytes=_SEQ * _HIDDEN * 4,
                       model={"kind": "cost-only", "hidden": _HIDDEN, "seq": _SEQ})


def unit_space(k: int, choice_blocks: int = 32, fwd: float = 1.0 / 8, bwd: float = 1.0 / 8,
               bwd_input_share: float = 0.5, name: str | None = None) -> SearchSpace:
    """The authors' bubble model: choice blocks only, unit costs (per stage of 8 blocks F = B = 1)."""
    cand = tuple(Candidate(f"c{i}", "unit", fwd, bwd, param_bytes=1 << 20, act_bytes=1 << 10,
                           bwd_input_share=bwd_input_share) for i in range(k))
    return SearchSpace(name=name or f"unit-k{k}", blocks=tuple(Block(f"b{i}", cand) for i in range(choice_blocks)),
                       model={"kind": "cost-only"}, batch_size=1, message_bytes=0)


def _tiny_transformer() -> SearchSpace:
    d, seq, vocab = 32, 12, 16
    ops = (
        ("attn1", "attention", {"heads": 1}, 1.0), ("attn2", "attention", {"heads": 2}, 1.1),
        ("attn4", "attention", {"heads": 4}, 1.2), ("conv3", "conv", {"kernel": 3}, 0.8),
        ("conv5", "conv", {"kernel": 5}, 0.9), ("glu", "glu", {}, 0.9),
    )

    def cands() -> tuple[Candidate, ...]:
        return tuple(Candidate(n, op, f * 1e-3, 2 * f * 1e-3, param_bytes=4 * d * d * 4 * 3,
                               act_bytes=seq * d * 4 * 4, args=a) for n, op, a, f in ops)

    blocks = [Block("embed", (Candidate("embed", "embedding", 0.2e-3, 0.4e-3, 2 * vocab * d * 4, seq * d * 4),),
                    fixed=True, role="embed")]
    blocks += [Block(f"enc{i}", cands(), role="encoder") for i in range(4)]
    blocks += [Block(f"dec{i}", cands(), role="decoder") for i in range(4)]
    blocks.append(Block("head", (Candidate("head", "linear", 0.2e-3, 0.4e-3, vocab * d * 4 + 2 * d * 4,
                                           seq * vocab * 4),), fixed=True, role="head"))
    return SearchSpace("tiny-transformer", tuple(blocks), batch_size=16, message_bytes=2 * seq * d * 4,
                       model={"kind": "transformer", "d_model": d, "seq_len": seq, "vocab": vocab, "ffn": 2 * d,
                              "task": "reverse"})


def _digits_cnn() -> SearchSpace:
    ch = 16
    ops = (("conv3", "conv", {"kernel": 3}, 1.0), ("conv5", "conv", {"kernel": 5}, 1.6),
           ("dwsep3", "dwsep", {"kernel": 3}, 0.7), ("dilated3", "conv", {"kernel": 3, "dilation": 2}, 1.0),
           ("skip", "identity", {}, 0.05), ("mlp", "pointwise", {}, 0.4))

    def cands() -> tuple[Candidate, ...]:
        out = []
        for n, op, a, f in ops:
            k = a.get("kernel", 1)
            pb = 0 if op == "identity" else (ch * ch * k * k * 4 if op == "conv" else ch * (k * k + ch) * 4)
            out.append(Candidate(n, op, f * 1e-4, 2 * f * 1e-4, param_bytes=pb, act_bytes=ch * 64 * 4, args=a))
        return tuple(out)

    blocks = [Block("stem", (Candidate("stem", "conv", 0.5e-4, 1e-4, ch * 9 * 4, ch * 64 * 4),), fixed=True,
                    role="stem")]
    blocks += [Block(f"cell{i}", cands(), role="cell") for i in range(6)]
    blocks.append(Block("head", (Candidate("head", "linear", 0.3e-4, 0.6e-4, (ch * 10 + 10) * 4, 10 * 4),),
                        fixed=True, role="head"))
    return SearchSpace("digits-cnn", tuple(blocks), batch_size=32, message_bytes=ch * 64 * 4,
                       model={"kind": "cnn", "channels": ch, "classes": 10, "image": 8})


def _sparse_mlp() -> SearchSpace:
    """Residual MLP blocks with K = 32 candidates each: conflicts are sparse, tasks are compute-heavy."""
    width, n_in, classes, batch = 256, 32, 10, 64
    hiddens = (256, 384, 512, 640)
    cands = tuple(
        Candidate(f"h{h}_{v}", "mlp", fwd=4 * batch * width * h * 1e-10, bwd=8 * batch * width * h * 1e-10,
                  param_bytes=(2 * width * h + width + h) * 4, act_bytes=(width + h) * 4, args={"hidden": h})
        for v in range(8) for h in hiddens
    )
    blocks = [Block("input", (Candidate("input", "linear", 1e-5, 2e-5, (n_in + 1) * width * 4, width * 4),),
                    fixed=True, role="input")]
    blocks += [Block(f"mlp{i}", cands, role="mlp") for i in range(8)]
    blocks.append(Block("head", (Candidate("head", "linear", 1e-5, 2e-5, (width + 1) * classes * 4, classes * 4),),
                        fixed=True, role="head"))
    return SearchSpace("sparse-mlp", tuple(blocks), batch_size=batch, message_bytes=width * 4,
                       model={"kind": "mlp", "in": n_in, "width": width, "classes": classes})


_FIXED_PRESETS = {
    "tiny-transformer": _tiny_transformer,
    "digits-cnn": _digits_cnn,
    "sparse-mlp": _sparse_mlp,
}
_NASPIPE_RE = re.compile(r"naspipe-k(\d+)$")
_UNIT_RE = re.compile(r"unit-k(\d+)$")
_UNIT_BW_RE = re.compile(r"unit-bw-k(\d+)$")


def preset_names() -> list[str]:
    return ["naspipe-k12", "naspipe-k24", "naspipe-k48", "naspipe-k96", *_FIXED_PRESETS,
            "unit-k12", "unit-k24", "unit-k48", "unit-k96", "unit-bw-k48"]


def preset(name: str) -> SearchSpace:
    """A named preset. ``naspipe-kK`` and ``unit-kK`` / ``unit-bw-kK`` accept any K >= 1.

    ``unit-kK``: 32 choice blocks, F = B = 1 per 8-block stage (the authors' bubble model).
    ``unit-bw-kK``: the split-backward model, F = 1, B = W = 1 per 8-block stage (backward 2).
    """
    if name in _FIXED_PRESETS:
        return _FIXED_PRESETS[name]()
    for rx, make in ((_NASPIPE_RE, _naspipe_space), (_UNIT_RE, unit_space),
                     (_UNIT_BW_RE, lambda k: unit_space(k, bwd=2.0 / 8, name=f"unit-bw-k{k}"))):
        m = rx.match(name)
        if m:
            k = int(m.group(1))
            if k < 1:
                raise SpaceError(f"preset {name!r}: K must be >= 1")
            return make(k)
    raise UnknownSpace(name, f"unknown space {name!r}; presets: {', '.join(preset_names())} "
                             "(or a path to a JSON file, or module:function)")


_RESOLVERS: list[Callable[[Any], SearchSpace | None]] = []


def register_resolver(fn: Callable[[Any], SearchSpace | None]) -> None:
    """Let ``resolve_space`` accept more: ``fn(x)`` returns a space or None (``naspipe.supernet`` registers
    ``module:function`` and Supernet objects, so this torch-free module never imports them)."""
    if fn not in _RESOLVERS:
        _RESOLVERS.append(fn)


def resolve_space(name_or_path: Any) -> SearchSpace:
    """A preset name, a path to a JSON file, a SearchSpace (returned as is), or what a registered resolver
    accepts (``module:function``, a ``naspipe.Supernet``)."""
    if isinstance(name_or_path, SearchSpace):
        return name_or_path
    for fn in _RESOLVERS:
        sp = fn(name_or_path)
        if sp is not None:
            return sp
    if not isinstance(name_or_path, str):
        raise SpaceError(f"a space is a preset name, a JSON file, module:function or a naspipe.Supernet, "
                         f"got {type(name_or_path).__name__}")
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_space(name_or_path)
    return preset(name_or_path)
