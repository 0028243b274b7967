"""The runtime's context cache on CPU: real copies, budget, pins, stalls, events, and exact training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from naspipe.runtime.layer_cache.context import CacheError, ContextCache

D = 32
NB = (D * D + D) * 4  # bytes of one nn.Linear(D, D)


def _modules(n: int = 6, seed: int = 0) -> dict[int, nn.Module]:
    torch.manual_seed(seed)
    return {i: nn.Linear(D, D) for i in range(n)}


def test_acquire_loads_into_separate_buffers_and_eviction_writes_back() -> None:
    mods = _modules(2)
    host_ptr = mods[0].weight.data_ptr()
    with ContextCache(mods, budget=NB) as c:  # room for one key
        assert c.nbytes(0) == NB and not c.resident(0)
        stall = c.acquire([0], tag=7)
        assert stall > 0 and c.resident(0)
        assert mods[0].weight.data_ptr() != host_ptr  # a real copy in the cache's own buffer
        with torch.no_grad():
            mods[0].weight.add_(1.0)
        expect = mods[0].weight.detach().clone()
        c.release([0], dirty=True)
        c.acquire([1])  # no room: key 0 is written back and evicted first
        assert not c.resident(0) and c.resident(1)
        assert mods[0].weight.data_ptr() == host_ptr
        assert torch.equal(mods[0].weight, expect)  # the update survived the round trip
        c.release([1], dirty=False)
        kinds = [(e.kind, e.key, e.tag, e.bytes) for e in c.events]
        assert ("stall", None, 7, NB) in kinds and ("evict", 0, -1, NB) in kinds
        assert all(e.start <= e.end for e in c.events)
        assert c.stats.peak_bytes <= NB and c.stats.bytes_d2h == NB and c.stats.bytes_h2d == 2 * NB


def test_prefetched_keys_hit() -> None:
    with ContextCache(_modules(4), budget=4 * NB) as c:
        c.prefetch([2, 3], tag=1)
        c.drain()
        assert c.resident_keys() == {2, 3}
        assert c.acquire([2, 3]) == 0.0
        assert c.stats.hits == 1 and c.stats.acquires == 1 and c.stats.prefetches == 2
        assert [e.kind for e in c.events] == ["prefetch", "prefetch"]
        c.release([2, 3])


def test_nothing_acquired_is_evicted_and_the_budget_holds() -> None:
    mods = _modules(8)
    with ContextCache(mods, budget=3 * NB) as c:
        c.acquire([0, 1])
        pinned = {k: mods[k].weight.detach().clone() for k in (0, 1)}
        for k in range(2, 8):  # churn through the one free slot
            c.prefetch([k])
            c.evict([0, 1])  # refused: pinned
            c.drain()
            assert c.resident(0) and c.resident(1)
            assert c.device_bytes <= 3 * NB
        c.prefetch([5, 6, 7])  # no room for all: the rest is dropped, never forced
        c.drain()
        assert c.stats.prefetches_dropped >= 1
        for k in (0, 1):
            assert torch.equal(mods[k].weight, pinned[k])
        c.release([0, 1])
        c.evict([0, 1])
        c.drain()
        assert not c.resident(0) and not c.resident(1)
        assert c.stats.peak_bytes <= 3 * NB


def test_bad_requests() -> None:
    mods = _modules(3)
    with pytest.raises(CacheError, match="exceeds the budget"):
        ContextCache(mods, budget=NB - 1)
    c = ContextCache(mods, budget="2KB" if NB <= 2000 else 2 * NB)
    try:
        with pytest.raises(KeyError):
            c.acquire([9])
        with pytest.raises(CacheError, match="pinned working set"):
            c.acquire([0, 1, 2])
        with pytest.raises(CacheError, match="not acquired"):
            c.release([0])
    finally:
        c.close()
    with pytest.raises(CacheError, match="closed"):
        c.acquire([0])
    assert not c._worker.is_alive()


def _train(mods: dict[int, nn.Module], cache: ContextCache | None, steps: int = 12) -> list[torch.Tensor]:
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, foreach=False) for k, m in mods.items()}
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        keys = [step % len(mods), (step * 3 + 1) % len(mods)]
        keys = list(dict.fromkeys(keys))
        if cache is not None:
            cache.prefetch([(step + 1) % len(mods)])
            cache.acquire(keys, tag=step)
        x = torch.randn(4, D, generator=gen)
        for k in keys:
            x = torch.tanh(mods[k](x))
        loss = x.pow(2).mean()
        for k in keys:
            opts[k].zero_grad()
        loss.backward()
        for k in keys:
            opts[k].step()
        if cache is not None:
            cache.release(keys, dirty=True)
    if cache is not None:
        cache.close()
    return [p.detach().clone() for k in sorted(mods) for p in mods[k].parameters()]


@pytest.mark.parametrize("reserve", [False, True])
def test_training_through_the_cache_is_bit_identical(reserve: bool) -> None:
    """SGD with momentum on 5 linear layers, 2 per step, a budget of 2 layers (+ their momentum): every step
    evicts and reloads; the result equals training without a cache, bit for bit. With the momentum's room
    set aside (``extra_bytes``) the budget holds from the first step on."""
    plain = _train(_modules(5, seed=3), None)
    mods = _modules(5, seed=3)
    opts_holder: dict = {}

    def state(k):  # the optimizer state of key k, moved with it
        opt = opts_holder.get(k)
        if opt is None:
            return []
        return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]

    cache = ContextCache(mods, budget=4 * NB, extra_tensors=state,
                         extra_bytes=(lambda k: NB) if reserve else None)
    original = torch.optim.SGD

    def make(params, **kw):  # record each key's optimizer so its state can travel
        opt = original(params, **kw)
        for k, m in mods.items():
            if list(m.parameters())[0] is list(opt.param_groups[0]["params"])[0]:
                opts_holder[k] = opt
        return opt

    torch.optim.SGD = make
    try:
        cached = _train(mods, cache)
    finally:
        torch.optim.SGD = original
    assert all(torch.equal(a, b) for a, b in zip(plain, cached, strict=True))
    assert cache.stats.evictions > 0 and cache.stats.bytes_d2h > 0
    if reserve:
        assert cache.stats.peak_bytes <= 4 * NB  # each layer's momentum lives in the room set aside for it
    else:
        assert cache.stats.peak_bytes <= 4 * NB + 2 * NB  # momentum adopted during a step counts from then on
    # the momentum travels with its layer: adopted (a layer's bytes now count it too), and every momentum
    # buffer is back in host memory the cache owns, not in a device buffer
    assert all(cache.nbytes(k) == 2 * NB for k in mods)
    homes = {s.host.data_ptr() for slots in cache._slots.values() for s in slots}
    momenta = [v for opt in opts_holder.values() for st in opt.state.values() for v in st.values()
               if isinstance(v, torch.Tensor)]
    assert len(momenta) == 10 and all(v.data_ptr() in homes for v in momenta)


def test_saved_by_reference_lets_a_key_move_between_forward_and_backward() -> None:
    """Forward with the key resident, release and evict it (its buffer goes back to the pool and is reused),
    load it again, backward: the gradients equal an ordinary forward/backward, bit for bit."""
    plain = _modules(3, seed=5)
    x = torch.randn(4, D, generator=torch.Generator().manual_seed(2))
    y = torch.tanh(plain[1](torch.tanh(plain[0](x.clone().requires_grad_())))).pow(2).sum()
    y.backward()
    want = [p.grad.clone() for k in (0, 1) for p in plain[k].parameters()]

    mods = _modules(3, seed=5)
    with ContextCache(mods, budget=3 * NB) as cache:
        cache.acquire([0, 1])
        with cache.saved_by_reference([0, 1]):
            y = torch.tanh(mods[1](torch.tanh(mods[0](x.clone().requires_grad_())))).pow(2).sum()
        cache.release([0, 1], dirty=False)
        cache.evict([0, 1])
        cache.drain()
        cache.acquire([2])  # loads into a buffer 0 or 1 had at the forward, and keeps it
        for p in mods[2].parameters():
            p.data.fill_(1e3)
        cache.acquire([0, 1])  # one of them lands in a fresh buffer
        y.backward()
        got = [p.grad.clone() for k in (0, 1) for p in mods[k].parameters()]
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


def test_saved_by_reference_refuses_a_backward_without_its_keys() -> None:
    mods = _modules(2, seed=1)
    with ContextCache(mods, budget=2 * NB) as cache:
        cache.acquire([0])
        with cache.saved_by_reference([0]):
            y = torch.tanh(mods[0](torch.randn(2, D, requires_grad=True))).sum()
        cache.release([0], dirty=False)
        with pytest.raises(CacheError, match="acquire it before the backward"):
            y.backward()
