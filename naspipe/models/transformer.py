"""The encoder-decoder transformer supernet (preset ``tiny-transformer``), one module per block/candidate.

Stages exchange ONE float32 tensor, the stacked state ``(2, B, T, d)``: part 0 is the encoder state,
part 1 the decoder state. The embedding block turns the token input ``(2, B, T)`` (source, decoder
input; int64, pad 0) into that state; encoder candidates update part 0; decoder candidates run a causal
self-op on part 1, cross-attend to part 0 (the final encoder output) and apply an FFN; the head maps
part 1 to logits ``(B, T, vocab)``.

The source padding mask travels inside the message: every encoder position holding a pad token is
kept exactly 0 in part 0 (the embedding and each encoder block zero it), so any block recovers the mask
as ``part0.ne(0).any(-1)``. A real position is never all-zero (it holds an embedding plus residuals).
Target pads need no mask: they sit at the end and the decoder is causal; the loss ignores them.

A candidate owns everything it uses (its norms, its FFN, its cross-attention), so the causal rule's
unit, one candidate of one block, covers every weight a subnet writes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from naspipe.spaces.space import Block, Candidate, SearchSpace

PAD = 0
BOS = 1
INIT_GAIN = 1.0  # weights ~ U(+-1/sqrt(fan_in)), torch's Linear default


def _dims(space: SearchSpace) -> tuple[int, int, int, int]:
    m = space.model
    try:
        return int(m["d_model"]), int(m["seq_len"]), int(m["vocab"]), int(m.get("ffn", 2 * int(m["d_model"])))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"space {space.name!r}: a transformer model needs integer d_model, seq_len and vocab "
                         f"(got {dict(m)})") from None


def source_keep(enc: Tensor) -> Tensor:
    """(B, T) bool: True at real source positions (pads are exactly 0 in the encoder state)."""
    return enc.ne(0).any(-1)


# ---- candidate ops: (h (B,T,d), key_keep (B,T) bool or None, causal) -> (B,T,d) --------------------
class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        if heads < 1 or d % heads:
            raise ValueError(f"attention: d_model {d} is not divisible by heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, h: Tensor, keep: Tensor | None, causal: bool) -> Tensor:
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return self.out(_attend(q, k, v, self.heads, keep, causal))


class CrossAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        if heads < 1 or d % heads:
            raise ValueError(f"cross-attention: d_model {d} is not divisible by heads {heads}")
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def forward(self, h: Tensor, memory: Tensor, keep: Tensor) -> Tensor:
        k, v = self.kv(memory).chunk(2, dim=-1)
        return self.out(_attend(self.q(h), k, v, self.heads, keep, False))


def _attend(q: Tensor, k: Tensor, v: Tensor, heads: int, keep: Tensor | None, causal: bool) -> Tensor:
    """Plain softmax attention written out (no fused kernel), so every process computes the same bits."""
    b, tq, d = q.shape
    tk = k.shape[1]
    dh = d // heads
    q = q.reshape(b, tq, heads, dh).transpose(1, 2)
    k = k.reshape(b, tk, heads, dh).transpose(1, 2)
    v = v.reshape(b, tk, heads, dh).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) * (dh ** -0.5)
    if keep is not None:
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    if causal:
        future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, tq, d)


class Conv(nn.Module):
    """1-d convolution over time, ``same`` padding in the encoder, left (causal) padding in the decoder."""

    def __init__(self, d: int, kernel: int, dilation: int = 1):
        super().__init__()
        if kernel < 1 or dilation < 1:
            raise ValueError(f"conv: kernel {kernel} and dilation {dilation} must be >= 1")
        self.span = dilation * (kernel - 1)
        self.conv = nn.Conv1d(d, d, kernel, dilation=dilation)

    def forward(self, h: Tensor, keep: Tensor | None, causal: bool) -> Tensor:
        x = h.transpose(1, 2)
        pad = (self.span, 0) if causal else (self.span // 2, self.span - self.span // 2)
        return self.conv(F.pad(x, pad)).transpose(1, 2)


class GLU(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.inp = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def forward(self, h: Tensor, keep: Tensor | None, causal: bool) -> Tensor:
        return self.out(F.glu(self.inp(h), dim=-1))


def make_op(cand: Candidate, d: int) -> nn.Module:
    a: dict[str, Any] = dict(cand.args)
    if cand.op == "attention":
        return SelfAttention(d, int(a.get("heads", 1)))
    if cand.op == "conv":
        return Conv(d, int(a.get("kernel", 3)), int(a.get("dilation", 1)))
    if cand.op in ("glu", "ffn"):
        return GLU(d)
    raise ValueError(f"candidate {cand.name!r}: transformer op {cand.op!r} is not one of attention, conv, glu")


class FFN(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.inp = nn.Linear(d, hidden)
        self.out = nn.Linear(hidden, d)

    def forward(self, h: Tensor) -> Tensor:
        return self.out(F.relu(self.inp(h)))


# ---- blocks: every block module maps the message to the message ------------------------------------
class Embed(nn.Module):
    """Tokens (2, B, T) int64 -> state (2, B, T, d); source pads are exactly 0 in part 0."""

    def __init__(self, vocab: int, d: int, seq: int):
        super().__init__()
        self.src = nn.Embedding(vocab, d)
        self.tgt = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)

    def forward(self, tokens: Tensor) -> Tensor:
        src, tgt = tokens.unbind(0)
        pos = self.pos.weight[: src.shape[1]]
        enc = (self.src(src) + pos).masked_fill(src.eq(PAD).unsqueeze(-1), 0.0)
        return torch.stack([enc, self.tgt(tgt) + pos])


class EncoderLayer(nn.Module):
    def __init__(self, op: nn.Module, d: int, ffn: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.op = op
        self.norm2 = nn.LayerNorm(d)
        self.ffn = FFN(d, ffn)

    def forward(self, x: Tensor) -> Tensor:
        enc, dec = x.unbind(0)
        keep = source_keep(enc)
        pads = ~keep.unsqueeze(-1)
        h = enc + self.op(self.norm1(enc).masked_fill(pads, 0.0), keep, False)
        h = h + self.ffn(self.norm2(h))
        return torch.stack([h.masked_fill(pads, 0.0), dec])


class DecoderLayer(nn.Module):
    def __init__(self, op: nn.Module, d: int, ffn: int, cross_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.op = op
        self.norm_mem = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.cross = CrossAttention(d, cross_heads)
        self.norm3 = nn.LayerNorm(d)
        self.ffn = FFN(d, ffn)

    def forward(self, x: Tensor) -> Tensor:
        enc, dec = x.unbind(0)
        keep = source_keep(enc)
        h = dec + self.op(self.norm1(dec), None, True)
        h = h + self.cross(self.norm2(h), self.norm_mem(enc), keep)
        h = h + self.ffn(self.norm3(h))
        return torch.stack([enc, h])


class Head(nn.Module):
    """State (2, B, T, d) -> logits (B, T, vocab) from the decoder part."""

    def __init__(self, d: int, vocab: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, vocab)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.norm(x.select(0, 1)))


# ---- the family interface used by stage.py ---------------------------------------------------------
def fixed_block(space: SearchSpace, index: int) -> nn.Module:
    d, seq, vocab, _ = _dims(space)
    block: Block = space.blocks[index]
    op = block.candidates[0].op
    if block.role == "embed" or op == "embedding":
        return Embed(vocab, d, seq)
    if block.role == "head" or op == "linear":
        return Head(d, vocab)
    raise ValueError(f"block {block.name!r}: a fixed transformer block is an embedding or the head, got {op!r}")


def candidate(space: SearchSpace, index: int, cand: Candidate) -> nn.Module:
    d, _, _, ffn = _dims(space)
    block = space.blocks[index]
    if block.role == "encoder":
        return EncoderLayer(make_op(cand, d), d, ffn)
    if block.role == "decoder":
        heads = int(space.model.get("cross_heads", 2 if d % 2 == 0 else 1))
        return DecoderLayer(make_op(cand, d), d, ffn, heads)
    raise ValueError(f"block {block.name!r}: a transformer choice block has role encoder or decoder, "
                     f"got {block.role!r}")


DOMAIN = "reverse"  # batch j ~ hashed_generator("data-reverse", seed, j); held-out i: "heldout-reverse"


def batch(space: SearchSpace, j: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random token sequences of random length (tokens ``2..vocab-1``, padded with 0 at the end); the target
    is the reversed source, the decoder input is ``BOS`` then the target shifted right. Input ``(2, B, T)``
    int64 = [source, decoder input], target ``(B, T)`` int64 (0 = pad, ignored by the loss)."""
    m = space.model
    if m.get("task", "reverse") != "reverse":
        raise ValueError(f"space {space.name!r}: unknown transformer task {m.get('task')!r} (known: reverse)")
    b, t, vocab = space.batch_size, int(m["seq_len"]), int(m["vocab"])
    if vocab < 3:
        raise ValueError(f"space {space.name!r}: vocab must be >= 3 (0 = pad, 1 = BOS), got {vocab}")
    lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=g)
    tokens = torch.randint(2, vocab, (b, t), generator=g)
    real = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    src = tokens.masked_fill(~real, PAD)
    target = torch.full_like(src, PAD)
    for i, n in enumerate(lengths.tolist()):
        target[i, :n] = src[i, :n].flip(0)
    dec_in = torch.cat([torch.full((b, 1), BOS, dtype=src.dtype), target[:, :-1]], dim=1)
    return torch.stack([src, dec_in]), target


def heldout(space: SearchSpace) -> Any:
    """Freshly generated batches (8 by default), from generators of their own."""
    return lambda i, g: batch(space, i, g)


def check(space: SearchSpace) -> None:
    _dims(space)


def loss(out: Tensor, target: Tensor) -> Tensor:
    """Mean token cross-entropy over non-pad target positions."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1), ignore_index=PAD)


def accuracy(out: Tensor, target: Tensor) -> float:
    keep = target.ne(PAD)
    return float((out.argmax(-1).eq(target) & keep).sum()) / max(1, int(keep.sum()))
