"""The split backward (``csp-bw``): ``B`` computes the input gradient only, ``W`` the weight gradients.

* unit: on a ``StageModel``, the input gradient from ``B`` and the weight gradients from ``W`` (per layer
  call, and the per-block fallback alone) equal one full backward bit for bit (both presets, shared
  layers frozen and delayed:2, a middle stage and the last stage, which ends in the loss);
* executor: a split ``B`` leaves every weight gradient untouched, sends the input gradient, and ``W`` does
  the update; the order is enforced;
* real processes: ``csp-bw`` on 2 and 4 stages, with jitter, passes ``verify`` against the sequential
  reference for two presets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from naspipe.models import build_stage, input_of, make_batch, target_of
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes, verify, write_losses, write_params
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.split_backward.splitgrad import BlockTargets, LayerCapture, input_grad, weight_grads
from naspipe.runtime.stage_exec import StageExecutor
from naspipe.runtime.stagerun import StageRun
from naspipe.sched.tasks import WEIGHT
from naspipe.sched.trace import Trace, check_causal
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.partition import partition
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import preset

N = 16  # subnets per multi-process run


def _stage_input(space, lo: int, seed: int, j: int, shared):
    """The activation stage ``[lo, ...)`` receives for subnet ``j`` (blocks before ``lo`` run here)."""
    x = input_of(space, make_batch(space, seed, j))
    if lo == 0:
        return x
    with torch.no_grad():
        head = build_stage(space, range(0, lo), seed, shared)
        return head(x, UniformStream(space, seed, 2)[j])


@pytest.mark.parametrize("space", ["tiny-transformer", "digits-cnn"])
@pytest.mark.parametrize("shared", ["frozen", "delayed:2"])
@pytest.mark.parametrize("where", ["middle", "last"])
def test_split_gradients_equal_one_full_backward_bit_for_bit(space, shared, where):
    sp, sh, seed = preset(space), parse_shared(shared), 5
    nb = sp.num_blocks
    lo, hi = (1, nb - 1) if where == "middle" else (nb // 2, nb)
    model = build_stage(sp, range(lo, hi), seed, sh)
    targets = BlockTargets(model)
    capture = LayerCapture(model)
    live_fixed = {n: p for n, p in model.fixed_named_parameters().items() if p.requires_grad}
    stream = UniformStream(sp, seed, 2)
    checked = 0
    for j in range(2):
        subnet = stream[j]
        x0 = _stage_input(sp, lo, seed, j, sh)
        target = target_of(sp, make_batch(sp, seed, j))
        g_out = None
        if where == "middle":
            with torch.no_grad():
                shape = model(x0, subnet).shape
            g_out = torch.randn(shape, generator=torch.Generator().manual_seed(j))

        def run(capture, x0=x0, subnet=subnet, target=target):
            x = x0.detach().clone().requires_grad_(True)
            leaves = ({n: p.detach().clone().requires_grad_(True) for n, p in live_fixed.items()}
                      if live_fixed else None)
            out = model(x, subnet, leaves, capture=capture)
            if where == "last":
                out = model.loss(out, target)
            return x, leaves, out

        # one full backward
        x, leaves, out = run(None)
        torch.autograd.backward(out, g_out)
        full_in = x.grad
        want = targets.targets(subnet, leaves)
        full_w = [[t.grad for t in ts] for ts in want]
        for ts in want:
            for t in ts:
                t.grad = None
        # split: B then W
        blocks: list = []
        layers: list = []
        capture.active = layers
        x, leaves, out = run(blocks)
        capture.active = None
        assert len(blocks) == hi - lo and layers
        gin, seen = input_grad(out, x, g_out, [*blocks, *(c.out for c in layers)])
        block_grads, layer_grads = seen[:len(blocks)], seen[len(blocks):]
        assert x.grad is None and all(g is not None for g in block_grads)
        ts_split = targets.targets(subnet, leaves)
        assert all(t.grad is None for ts in ts_split for t in ts)  # B computed no weight gradient
        got = weight_grads(blocks, block_grads, ts_split, layers, layer_grads)
        per_block = weight_grads(blocks, block_grads, ts_split)  # the block-level fallback alone
        assert torch.equal(gin, full_in)
        for ts, fw in zip(ts_split, full_w, strict=True):
            for t, f in zip(ts, fw, strict=True):
                assert (got[t] is None) == (f is None)
                if f is not None:
                    assert torch.equal(got[t], f) and torch.equal(per_block[t], f)
                    checked += 1
    assert checked > 0
    if shared == "delayed:2" and where == "last":
        assert live_fixed  # the head's fixed weights were among the targets


@pytest.mark.parametrize("shared", ["frozen", "delayed:2"])
def test_split_b_sends_the_input_gradient_and_w_updates(shared):
    sp, sh = preset("tiny-transformer"), parse_shared(shared)
    part = partition(sp, 2)
    subnets = [UniformStream(sp, 1, 3)[j] for j in range(3)]
    mk = [build_stage(sp, part.blocks(s), 1, sh) for s in range(2)]
    ex = [StageExecutor(m, subnets, StageRun.local(s, 2, "csp-bw"), seed=1, optimizer="sgd", lr=0.1,
                        shared_delay=sh.delay if sh.trains_shared else None, write_kind=WEIGHT)
          for s, m in enumerate(mk)]
    before = {n: p.detach().clone() for n, p in mk[1].global_named_parameters().items()}
    a, rg = ex[0].forward(0)
    assert rg
    ex[1].forward(0, a.clone(), rg)
    with pytest.raises(RuntimeError, match="before B"):
        ex[1].weight(0)
    gin = ex[1].backward(0)
    assert gin is not None and gin.shape == a.shape
    assert all(p.grad is None for p in mk[1].parameters())
    assert all(torch.equal(p, before[n]) for n, p in mk[1].global_named_parameters().items())
    assert ex[0].backward(0, gin) is None  # stage 0: its input needs no gradient, nothing to compute
    assert ex[1].updates == 0
    ex[1].weight(0)
    ex[0].weight(0)
    assert ex[1].updates == 1 and ex[0].updates == 1 and ex[1].in_flight == 0 and ex[0].in_flight == 0
    assert any(not torch.equal(p, before[n]) for n, p in mk[1].global_named_parameters().items())
    # only a stage that sends an input gradient records layer calls: the first stage's modules carry no hooks
    # (they would cost every call in its F for nothing)
    assert not any(m._forward_hooks for m in mk[0].modules())
    assert any(m._forward_hooks for m in mk[1].modules())


# ---- real processes ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def split_refs(tmp_path_factory):
    """Reference runs, one per (space, shared), computed once."""
    root = tmp_path_factory.mktemp("split_refs")

    def get(space: str, shared: str) -> Path:
        d = root / f"{space}-{shared.replace(':', '')}"
        if not d.exists():
            sp = preset(space)
            res = train_reference(sp, UniformStream(sp, 0, N), 0, parse_shared(shared))
            d.mkdir()
            write_losses(d / "losses.csv", res.losses)
            write_params(d / "params.json", param_hashes(res.model.global_named_parameters()))
        return d

    return get


@pytest.mark.parametrize("space,stages,shared,jitter", [
    ("tiny-transformer", 2, "frozen", 1.0),
    ("tiny-transformer", 4, "delayed:2", 0.5),
    ("digits-cnn", 2, "delayed:2", 1.0),
    ("digits-cnn", 4, "frozen", 0.5),
])
def test_csp_bw_runs_match_the_reference_bit_for_bit(tmp_path, split_refs, space, stages, shared, jitter):
    cfg = TrainConfig.create(space, tmp_path / f"bw-{space}-{stages}", stages=stages, subnets=N,
                             shared_layers=shared, jitter_ms=jitter, policy="csp-bw", progress=False, timeout=60,
                             sampler="uniform")  # (as the references: neighbours share candidates)
    train(cfg)
    ok, msg = verify(cfg.out, split_refs(space, shared))
    assert ok, msg
    trace = Trace.load(cfg.out / "trace.json")
    assert len(trace.compute_events()) == N * stages * 3
    assert {e.kind for e in trace.compute_events()} == {"F", "B", "W"}
    blocks = [[b for b in cfg.partition.blocks(s) if not cfg.space.blocks[b].fixed] for s in range(stages)]
    assert check_causal(trace, list(cfg.sequence), blocks, "W") == []
    assert json.loads((cfg.out / "status.json").read_text()) == {"complete": True}
