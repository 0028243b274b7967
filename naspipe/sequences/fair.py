"""Strict-fair and conflict-spreading subnet streams: sequences that pipeline.

Why it exists: CSP makes two subnets that share a candidate run in order, so the sequence, not only the
scheduler, decides how often the pipeline stalls. Under uniform sampling neighbouring subnets share
candidates often; these streams keep every candidate's frequency and keep its reuses apart.

``FairStream`` (strict fairness, FairNAS, Chu et al., ICCV 2021): a choice block with ``k`` candidates
cuts the sequence into groups of ``k`` consecutive subnets (its own period; blocks with different ``k``
each have their own) and trains every candidate exactly once per group, in the order of one seeded random
permutation per block per group. Fixed blocks (one candidate) stay 0. Stated bound: in any prefix of ``n``
subnets each candidate of a block with ``k`` candidates is trained ``floor(n/k)`` or ``floor(n/k) + 1``
times; in any ``L`` consecutive subnets between ``floor(L/k) - 1`` and ``ceil(L/k) + 1`` times.

``SpreadStream`` (conflict spreading) takes a base stream (``fair`` or ``uniform``) and, per block and per
chunk of ``k`` consecutive subnets (the fair groups), reorders the base's choices inside the chunk so that
each candidate's reuses lie as far apart as the chunk allows, boundaries between chunks included: at each
position it takes, in the base's order, the first remaining choice last used at least ``d = k - max(1,
k // 4)`` subnets ago, else (only possible with repeated choices in a uniform chunk) the remaining choice
used longest ago. The multiset of each block's choices in every chunk is the base's, so the stated bound
on the deviation from the base: at every multiple of ``k`` each candidate's count equals the base's, and
in any prefix it differs from the base's by at most ``floor(k / 2)``. Over a fair base the output is
itself strict-fair (the fair bounds above hold) and every reuse is at least ``d`` apart (a chunk's
candidate may move at most ``k - d`` places earlier than in the previous chunk, and such a choice always
exists). Where the fair base already keeps reuses ``d`` apart the spread stream equals it, so its minimum
reuse distance is never below fair's on the same seed. ``d < k`` on purpose: ``d = k`` would repeat one
permutation forever (only ``k`` distinct subnets for equal ``k``); the slack keeps the subnets diverse.
The distance does not depend on the stage count, so runs on any number of stages train the same sequence.

Every random number comes from SHAKE-256 of ``(seed, block, group)`` (``shake_words``, as ``UniformStream``), so
streams are identical on every machine and Python version; subnet ``j`` is a pure function of the seed and ``j``
(random access, so a run resumes mid-group bit for bit). No torch here.
"""

from __future__ import annotations

from naspipe.sequences.sequence import SubnetStream, UniformStream, _ListLike, shake_words
from naspipe.spaces.space import SearchSpace, Subnet


def _permutation(seed: int, block: int, group: int, k: int) -> list[int]:
    """A seeded random permutation of ``range(k)`` (Fisher-Yates on SHAKE-256 words)."""
    words = shake_words(f"naspipe-fair:{seed}:{block}:{group}", k)
    perm = list(range(k))
    for i in range(k - 1, 0, -1):
        r = words[i] % (i + 1)
        perm[i], perm[r] = perm[r], perm[i]
    return perm


SPREAD_BASES: tuple[str, ...] = ("fair", "uniform")  # the streams ``SpreadStream`` reorders


def spread_distance(k: int) -> int:
    """The reuse distance ``SpreadStream`` keeps in a block of ``k`` candidates: ``k - max(1, k // 4)``."""
    return max(1, k - max(1, k // 4))


class FairStream(_ListLike):
    """Strict-fair sampling: each candidate of a block with ``k`` candidates once per group of ``k`` subnets."""

    seeded = True  # a function of the seed, not a replayed sequence

    def __init__(self, space: SearchSpace, seed: int, n: int):
        if n < 0:
            raise ValueError("number of subnets must be >= 0")
        self.space, self.seed, self.n = space, int(seed), int(n)
        self._ks = [b.k for b in space.blocks]
        self._perms: dict[int, tuple[int, list[int]]] = {}  # per block: its latest group and permutation

    def __len__(self) -> int:
        return self.n

    def choice(self, b: int, j: int) -> int:
        """Block ``b``'s candidate in subnet ``j`` (any ``j >= 0``, also beyond ``len``)."""
        k = self._ks[b]
        if k <= 1:
            return 0
        g, r = divmod(j, k)
        held = self._perms.get(b)
        if held is None or held[0] != g:  # reads are mostly in order: one group per block is kept
            held = self._perms[b] = (g, _permutation(self.seed, b, g, k))
        return held[1][r]

    def __getitem__(self, j: int) -> Subnet:
        if not 0 <= j < self.n:
            raise IndexError(j)
        return tuple(self.choice(b, j) for b in range(len(self._ks)))


class SpreadStream(_ListLike):
    """The base stream's choices reordered inside each block's chunks to keep reuses apart (module docstring)."""

    seeded = True

    def __init__(self, space: SearchSpace, seed: int, n: int, base: str = "fair"):
        if base not in SPREAD_BASES:
            raise ValueError(f"spread's base is fair or uniform, got {base!r}")
        if n < 0:
            raise ValueError("number of subnets must be >= 0")
        self.space, self.seed, self.n, self.base = space, int(seed), int(n), base
        self._ks = [b.k for b in space.blocks]
        self._fair = FairStream(space, seed, 0)
        self._uniform = UniformStream(space, seed, 1 << 62)
        # each block's choices are generated chunk by chunk (a chunk depends on the one before)
        self._chosen: list[list[int]] = [[] for _ in self._ks]
        self._last: list[dict[int, int]] = [{} for _ in self._ks]

    def _base_chunk(self, b: int, start: int, k: int) -> list[int]:
        if self.base == "fair":
            return [self._fair.choice(b, start + r) for r in range(k)]
        return [self._uniform[start + r][b] for r in range(k)]

    def _extend(self, b: int, j: int) -> None:
        k, out, last = self._ks[b], self._chosen[b], self._last[b]
        d = spread_distance(k)
        while len(out) <= j:
            start = len(out)
            rest = self._base_chunk(b, start, k)
            for pos in range(start, start + k):
                pick = next((i for i, c in enumerate(rest) if pos - last.get(c, -k - d) >= d), None)
                if pick is None:  # only with repeated choices (a uniform chunk): the one used longest ago
                    pick = min(range(len(rest)), key=lambda i: (last.get(rest[i], -k - d), i))
                c = rest.pop(pick)
                out.append(c)
                last[c] = pos

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int) -> Subnet:
        if not 0 <= j < self.n:
            raise IndexError(j)
        row = []
        for b, k in enumerate(self._ks):
            if k <= 1:
                row.append(0)
                continue
            self._extend(b, j)
            row.append(self._chosen[b][j])
        return tuple(row)


def is_seeded(stream: SubnetStream) -> bool:
    """The stream is a function of the run's seed (uniform, fair, spread), not a replayed sequence."""
    return isinstance(stream, UniformStream) or bool(getattr(stream, "seeded", False))
