"""Shared-layer policies: how fixed blocks (embeddings, norms, output head) take part in the causal rule.

Every subnet uses every fixed block, so under the exact rule each subnet writes them and conflicts with
every earlier one. The user picks the semantics explicitly:

* ``frozen``: fixed blocks are never updated (what the NASPipe artifact silently does); no ordering;
* ``serial``: the exact rule; ``F(j,s)`` waits for every earlier write on a stage with fixed blocks;
* ``delayed:D``: subnet ``j`` reads the shared weights as they were after subnet ``j-D-1``'s update, a
  version that depends on ``j`` alone, so runs stay reproducible. ``serial`` is ``delayed:0``.
"""

from __future__ import annotations

from dataclasses import dataclass


class SharedPolicyError(ValueError):
    pass


@dataclass(frozen=True)
class SharedLayers:
    mode: str = "frozen"  # "frozen" | "serial" | "delayed"
    delay: int = 0

    @property
    def trains_shared(self) -> bool:
        return self.mode != "frozen"

    @property
    def gate(self) -> int | None:
        """``F(j,s)`` on a stage with fixed blocks needs every write ``i <= j - gate - 1`` done; None = free."""
        return None if self.mode == "frozen" else self.delay

    def version_read(self, j: int) -> int:
        """Number of shared-layer updates subnet ``j`` sees (``v_k`` = after updates of subnets < k)."""
        if self.mode == "frozen":
            return 0
        return max(0, j - self.delay)

    def __str__(self) -> str:
        return self.mode if self.mode != "delayed" else f"delayed:{self.delay}"


def parse_shared(text: str | SharedLayers) -> SharedLayers:
    if isinstance(text, SharedLayers):
        return text
    t = text.strip().lower()
    if t == "frozen":
        return SharedLayers("frozen")
    if t == "serial":
        return SharedLayers("serial", 0)
    if t.startswith("delayed"):
        _, sep, d = t.partition(":")
        if not sep or not d.strip().isdigit():
            raise SharedPolicyError(f"bad shared-layer policy {text!r}: use delayed:D with a whole number D >= 0")
        return SharedLayers("delayed", int(d))
    raise SharedPolicyError(f"unknown shared-layer policy {text!r}; choose frozen, serial or delayed:D")
