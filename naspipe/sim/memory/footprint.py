"""The static memory footprint of a partitioned space: bytes per candidate and per subnet on each stage.
"""

from __future__ import annotations

from naspipe.sim.memory.settings import Key
from naspipe.spaces.partition import Partition
from naspipe.spaces.space import SearchSpace, Subnet


class Footprint:
    """Per-stage keys, parameter and activation bytes of subnets, for one batch size."""

    def __init__(self, space: SearchSpace, part: Partition, batch: int):
        self.space, self.part, self.batch = space, part, batch
        self.blocks = [list(part.blocks(s)) for s in range(part.stages)]
        self.key_bytes: list[dict[Key, int]] = [
            {(b, c): space.candidate(b, c).param_bytes for b in bl for c in range(space.blocks[b].k)}
            for bl in self.blocks]
        self._cache: dict[tuple[int, Subnet], tuple[tuple[Key, ...], int, int]] = {}

    def keys(self, s: int, sub: Subnet) -> tuple[Key, ...]:
        """The subnet's candidates on stage ``s``, one per block (so no key repeats)."""
        return self._entry(s, sub)[0]

    def act(self, s: int, sub: Subnet) -> int:
        return self._entry(s, sub)[1]

    def params(self, s: int, sub: Subnet) -> int:
        """Parameter bytes of the subnet's candidates on stage ``s``."""
        return self._entry(s, sub)[2]

    def need(self, s: int, sub: Subnet) -> int:
        """Parameters plus activation of one subnet on stage ``s``."""
        _, act, params = self._entry(s, sub)
        return act + params

    def _entry(self, s: int, sub: Subnet) -> tuple[tuple[Key, ...], int, int]:
        ck = (s, sub)
        e = self._cache.get(ck)
        if e is None:
            keys = tuple((b, sub[b]) for b in self.blocks[s])
            act = self.batch * sum(self.space.candidate(b, sub[b]).act_bytes for b in self.blocks[s])
            kb = self.key_bytes[s]
            e = self._cache[ck] = (keys, act, sum(kb[k] for k in keys))
        return e

    # worst cases over the candidates of each block (the stream is produced at run time)
    def share(self, s: int) -> int:
        return self.space.supernet_param_bytes(self.blocks[s])

    def max_params(self, s: int) -> int:
        return sum(max(c.param_bytes for c in self.space.blocks[b].candidates) for b in self.blocks[s])

    def fixed_params(self, s: int) -> int:
        return sum(self.space.blocks[b].candidates[0].param_bytes for b in self.blocks[s] if self.space.blocks[b].fixed)

    def max_choice_params(self, s: int) -> int:
        return sum(max(c.param_bytes for c in self.space.blocks[b].candidates) for b in self.blocks[s]
                   if not self.space.blocks[b].fixed)

    def mean_choice_params(self, s: int) -> float:
        return sum(sum(c.param_bytes for c in self.space.blocks[b].candidates) / self.space.blocks[b].k
                   for b in self.blocks[s] if not self.space.blocks[b].fixed)

    def act_per_sample(self, s: int) -> int:
        return sum(max(c.act_bytes for c in self.space.blocks[b].candidates) for b in self.blocks[s])
