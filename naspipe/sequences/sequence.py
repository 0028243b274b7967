"""Subnet streams: the order in which subnets are trained, seen by consumers through a bounded window.

The sequence is produced by the exploration algorithm at run time; a scheduler may only look a bounded
window ahead. Streams here are deterministic by construction:

* ``UniformStream`` draws subnet ``j`` from SHAKE-256 of ``(seed, j)``, so it is identical for the same
  seed on every machine and Python version, and random access (for resume, for any stage) is free;
* ``ReplayStream`` holds a list of subnets: a file written by ``save_sequence``, a materialised stream;
* ``OnlineStream`` wraps an ``OnlineSampler``: a generator whose subnet ``j`` may depend on results of
  subnets up to ``j - lag`` only, which keeps runs reproducible.

``Window`` is the only door through which schedulers read a stream.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from naspipe.spaces.few_shot import base_of, few_shot_of
from naspipe.spaces.space import SearchSpace, SpaceError, Subnet, load_json_text


class WindowError(LookupError):
    """A consumer read a subnet beyond its window (a scheduling bug, never user input)."""


@runtime_checkable
class SubnetStream(Protocol):
    """A finite sequence of subnets with random access."""

    space: SearchSpace

    def __len__(self) -> int: ...

    def __getitem__(self, j: int) -> Subnet: ...


class _ListLike:
    space: SearchSpace

    def __iter__(self) -> Iterator[Subnet]:
        for j in range(len(self)):  # type: ignore[arg-type]
            yield self[j]  # type: ignore[index]

    def digest(self) -> str:
        """sha256 over the sequence (space name, then one line per subnet)."""
        return sequence_digest(self.space.name, list(self))

    def subnets_digest(self) -> str:
        """sha256 over the subnets alone (``subnets_digest``): what a run under another name compares."""
        return subnets_digest(list(self))


def shake_words(key: str, count: int) -> list[int]:
    """``count`` 64-bit words (little-endian) of SHAKE-256 of ``key``: every seeded stream's randomness (uniform,
    fair, spread), the same on every machine and Python version."""
    raw = hashlib.shake_256(key.encode()).digest(8 * count)
    return [int.from_bytes(raw[8 * i: 8 * i + 8], "little") for i in range(count)]


class UniformStream(_ListLike):
    """Uniform single-path sampling: every choice block picks a candidate uniformly."""

    def __init__(self, space: SearchSpace, seed: int, n: int):
        if n < 0:
            raise ValueError("number of subnets must be >= 0")
        self.space, self.seed, self.n = space, int(seed), int(n)
        self._ks = [b.k for b in space.blocks]
        self._cache: dict[int, Subnet] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int) -> Subnet:
        if not 0 <= j < self.n:
            raise IndexError(j)
        s = self._cache.get(j)
        if s is None:
            words = shake_words(f"naspipe-uniform:{self.seed}:{j}", len(self._ks))
            s = tuple(w % k if k > 1 else 0 for w, k in zip(words, self._ks, strict=True))
            self._cache[j] = s
        return s


class ReplayStream(_ListLike):
    """A list of subnets as a stream: a recorded sequence (``from_file``), a materialised stream, any list."""

    def __init__(self, space: SearchSpace, subnets: Sequence[Sequence[int] | Mapping[str, str]], *,
                 valid: bool = False):
        """``subnets``: index lists or ``{label: candidate}`` dicts, each validated against ``space``;
        ``valid=True``: subnet tuples already valid in ``space`` (another stream's), held as given."""
        self.space = space
        if valid:
            self._subnets: list[Subnet] = list(subnets)  # type: ignore[arg-type]
        else:
            self._subnets = [space.subnet_from_dict(s) if isinstance(s, Mapping)
                             else space.validate_subnet(list(s)) for s in subnets]

    def __len__(self) -> int:
        return len(self._subnets)

    def __getitem__(self, j: int) -> Subnet:
        return self._subnets[j]

    @classmethod
    def materialize(cls, stream: SubnetStream) -> ReplayStream:
        """A list-backed copy of an already valid stream (no re-validation)."""
        return cls(stream.space, [stream[j] for j in range(len(stream))], valid=True)

    @classmethod
    def from_file(cls, space: SearchSpace, path: str | Path) -> ReplayStream:
        """Load a sequence file (``save_sequence``'s format); SpaceError (one line) for an unreadable, non-UTF-8,
        malformed or too deeply nested file, another space, an invalid subnet, or a ``sha256`` that does not
        match the subnets."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise SpaceError(f"cannot read sequence file {str(path)!r}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise SpaceError(f"cannot read sequence file {str(path)!r}: not a UTF-8 text file (byte {e.start})") \
                from None
        data = load_json_text(text, f"cannot read sequence file {str(path)!r}")
        if not isinstance(data, dict) or not isinstance(data.get("subnets"), list):
            raise SpaceError(f"{path}: a sequence file is an object with a 'subnets' list")
        if data.get("space") not in (None, space.name):
            raise SpaceError(f"{path}: sequence was recorded for space {data.get('space')!r}, not {space.name!r}")
        subnets = []
        for i, sub in enumerate(data["subnets"]):
            if not isinstance(sub, (list, dict)):
                raise SpaceError(f"{path}: subnet {i} must be a list of choices or a {{label: candidate}} object, "
                                 f"got {sub!r}")
            try:
                subnets.append(space.subnet_from_dict(sub) if isinstance(sub, dict) else space.validate_subnet(sub))
            except SpaceError as e:
                raise SpaceError(f"{path}: subnet {i}: {e}") from None
        stream = cls(space, subnets, valid=True)
        recorded = data.get("sha256")
        if recorded is not None and recorded != stream.digest():
            raise SpaceError(f"{path}: its sha256 {str(recorded)[:12]}... does not match its subnets "
                             f"({stream.digest()[:12]}...): the file was changed after it was written")
        return stream


def save_sequence(stream: SubnetStream, path: str | Path) -> str:
    """Write a stream as JSON; returns its digest. A user supernet's subnets are written as label dicts; a few-shot
    run's as its base architectures (``naspipe.spaces.few_shot``: replayed with the same ``--few-shot``)."""
    space = stream.space
    subnets = [list(stream[j]) for j in range(len(stream))]
    if (split := few_shot_of(space)) is not None:
        subnets = [list(space.collapse(s)) for s in subnets]
        space = base_of(space)
    digest = sequence_digest(space.name, subnets)
    rows: list[Any] = subnets
    if space.model.get("kind") == "supernet":
        rows = [space.subnet_dict(s) for s in subnets]
    from naspipe.fileio.atomic import write_text_atomic

    write_text_atomic(path, json.dumps({"space": space.name, "sha256": digest, "subnets": rows,
                                        **({"few_shot": split.describe()} if split is not None else {})}))
    return digest


def subnets_digest(subnets: Sequence[Sequence[int]]) -> str:
    """sha256 over the subnets alone (no space name): equal for one sequence of a space under two names."""
    return sequence_digest("", subnets)


def sequence_digest(space_name: str, subnets: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256(space_name.encode())
    for s in subnets:
        h.update(("\n" + ",".join(map(str, s))).encode())
    return h.hexdigest()


class OnlineSampler(Protocol):
    """A run-time generator: subnet ``j`` from the results of subnets ``< j - lag + 1`` only."""

    lag: int

    def propose(self, j: int, results: Mapping[int, float]) -> Subnet: ...


class _Visible(Mapping[int, float]):
    """A read-only view of ``results`` that hides every subnet newer than ``limit``."""

    def __init__(self, results: Mapping[int, float], limit: int):
        self._results, self._limit = results, limit

    def __getitem__(self, k: int) -> float:
        if k > self._limit:
            raise KeyError(k)
        return self._results[k]

    def __iter__(self) -> Iterator[int]:
        return (k for k in self._results if k <= self._limit)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class OnlineStream(_ListLike):
    """Subnets generated at run time from earlier results, with a fixed lag for reproducibility.

    ``results`` must hold the loss of every subnet ``i <= j - lag`` before subnet ``j`` is read;
    the stream raises otherwise, so a run can never silently depend on timing. ``available()`` says how
    far the stream can be read now; schedulers never admit beyond it.
    """

    def __init__(self, space: SearchSpace, sampler: OnlineSampler, n: int):
        self.space, self.sampler, self.n = space, sampler, n
        self.results: dict[int, float] = {}
        self._contiguous = 0  # results of subnets [0, _contiguous) are all reported
        self._made: list[Subnet] = []

    def __len__(self) -> int:
        return self.n

    def report(self, j: int, loss: float) -> None:
        self.results[j] = loss
        while self._contiguous in self.results:
            self._contiguous += 1

    def available(self) -> int:
        """One past the last subnet that can be generated with the results reported so far."""
        return min(self.n, self._contiguous + self.sampler.lag)

    def __getitem__(self, j: int) -> Subnet:
        if not 0 <= j < self.n:
            raise IndexError(j)
        while len(self._made) <= j:
            i = len(self._made)
            need = i - self.sampler.lag
            if need >= self._contiguous:
                raise WindowError(f"subnet {i} needs results of subnets <= {need}, which are not reported yet")
            proposal = self.sampler.propose(i, _Visible(self.results, need))
            self._made.append(self.space.validate_subnet(list(proposal)))
        return self._made[j]


class Window:
    """A bounded view of a stream: subnets ``[0, lo + size)`` where ``lo`` is the oldest unfinished one.

    Schedulers read subnets only through a Window; ``max_read`` records the furthest index read so tests
    can prove a policy never looked beyond what it could know.
    """

    def __init__(self, stream: SubnetStream, size: int):
        if size < 1:
            raise ValueError("window must be >= 1")
        self.stream, self.size = stream, size
        self.lo = 0
        self.max_read = -1
        self.violations = 0

    def clone(self) -> Window:
        other = Window.__new__(Window)
        other.__dict__.update(self.__dict__)
        return other

    @property
    def horizon(self) -> int:
        """One past the last readable index (a run-time generated stream may not be readable that far yet)."""
        h = min(self.lo + self.size, len(self.stream))
        available = getattr(self.stream, "available", None)
        return h if available is None else min(h, available())

    def advance(self, lo: int) -> None:
        if lo < self.lo:
            raise ValueError("a window never moves back")
        self.lo = lo

    def __len__(self) -> int:
        return len(self.stream)

    def __getitem__(self, j: int) -> Subnet:
        if j >= self.lo + self.size:
            self.violations += 1
            raise WindowError(f"read subnet {j} beyond the window [{self.lo}, {self.lo + self.size})")
        if j > self.max_read:
            self.max_read = j
        return self.stream[j]
