"""Supernet modules per stage: same weights and names under any partition, and split training (detached
stage inputs, hand-chained backward, one optimizer per stage) bit-identical to the whole model."""

from __future__ import annotations

import pytest
import torch

from naspipe.models import (
    OPTIMIZERS,
    build_stage,
    evaluate,
    heldout_batches,
    input_of,
    keep_grads_of,
    make_batch,
    make_optimizer,
    model_kind,
    target_of,
)
from naspipe.models.transformer import BOS, PAD
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import SharedLayers, parse_shared
from naspipe.spaces.space import preset

torch.set_num_threads(1)

SPLITS = {
    "tiny-transformer": [[(0, 3), (3, 6), (6, 10)], [(0, 1), (1, 10)]],
    "digits-cnn": [[(0, 2), (2, 5), (5, 8)], [(0, 4), (4, 8)]],
}
FROZEN = SharedLayers("frozen")


def _snap(params: dict) -> dict:
    return {n: p.detach().clone() for n, p in params.items()}


def train_split(space, bounds, stream, seed, shared, optimizer, lr=None):
    """What the pipeline runtime does, run stage by stage in one process."""
    stages = [build_stage(space, range(a, b), seed, shared) for a, b in bounds]
    opts = [make_optimizer(s.parameters(), optimizer, lr) for s in stages]
    trains, delay = shared.trains_shared, shared.delay
    versions = [{0: _snap(s.fixed_named_parameters())} for s in stages]
    losses = {}
    for j in range(len(stream)):
        subnet = stream[j]
        batch = make_batch(space, seed, j)
        h = input_of(space, batch)
        inputs, outputs, reads = [], [], []
        for s, st in enumerate(stages):
            inp = h if s == 0 else h.detach().requires_grad_(True)
            read = None
            if trains and st.fixed_named_parameters():
                read = {n: t.clone().requires_grad_(True) for n, t in versions[s][max(0, j - delay)].items()}
            h = st(inp, subnet, fixed_params=read)
            inputs.append(inp)
            outputs.append(h)
            reads.append(read)
        assert stages[-1].holds_head and stages[0].holds_input
        loss = stages[-1].loss(h, target_of(space, batch))
        for o in opts:
            o.zero_grad(set_to_none=True)
        grad = None
        for s in reversed(range(len(stages))):
            if s == len(stages) - 1:
                loss.backward()
            elif outputs[s].requires_grad:
                torch.autograd.backward(outputs[s], grad)
            grad = inputs[s].grad if s > 0 else None
        for s, st in enumerate(stages):
            if reads[s] is not None:
                for n, p in st.fixed_named_parameters().items():
                    p.grad = reads[s][n].grad
            keep_grads_of(st.parameters(), st.subnet_parameters(subnet)
                          + (list(st.fixed_named_parameters().values()) if trains else []))
            opts[s].step()
            if trains:
                versions[s][j + 1] = _snap(st.fixed_named_parameters())
                versions[s].pop(j - delay, None)
        losses[j] = loss.item()
    params = {}
    for st in stages:
        params.update(st.global_named_parameters())
    return losses, params


@pytest.mark.parametrize("name", list(SPLITS))
def test_stage_build_equals_whole_build(name):
    space = preset(name)
    whole = build_stage(space, range(space.num_blocks), 7, FROZEN).global_named_parameters()
    for bounds in SPLITS[name]:
        parts = {}
        for a, b in bounds:
            st = build_stage(space, range(a, b), 7, FROZEN)
            assert not set(parts) & set(st.global_named_parameters())
            parts.update(st.global_named_parameters())
        assert list(parts) == list(whole)
        assert param_hashes(parts) == param_hashes(whole)
    other = build_stage(space, range(space.num_blocks), 8, FROZEN).global_named_parameters()
    assert param_hashes(other) != param_hashes(whole)
    assert all(p.dtype == torch.float32 for p in whole.values())


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("shared", ["frozen", "delayed:2"])
@pytest.mark.parametrize("name", list(SPLITS))
def test_split_training_is_bit_identical(name, shared, optimizer):
    space, pol = preset(name), parse_shared(shared)
    stream = UniformStream(space, 3, 6)
    ref = train_reference(space, stream, 3, pol, optimizer)
    ref_hashes = param_hashes(ref.model.global_named_parameters())
    init = param_hashes(build_stage(space, range(space.num_blocks), 3, pol).global_named_parameters())
    changed = {n for n in init if init[n] != ref_hashes[n]}
    assert changed and (pol.trains_shared == bool(changed & set(ref.model.fixed_named_parameters())))
    for bounds in SPLITS[name][:1] if optimizer == "adam" else SPLITS[name]:
        losses, params = train_split(space, bounds, stream, 3, pol, optimizer)
        assert [v.hex() for v in losses.values()] == [v.hex() for v in ref.losses.values()], bounds
        assert param_hashes(params) == ref_hashes, bounds


def test_unknown_or_cost_only_kind_is_refused():
    with pytest.raises(ValueError, match="no torch model"):
        build_stage(preset("naspipe-k12"), range(0, 3), 0, FROZEN)
    with pytest.raises(ValueError, match="non-empty contiguous range"):
        build_stage(preset("digits-cnn"), range(3, 3), 0, FROZEN)
    assert model_kind(preset("digits-cnn")) == "cnn"


@pytest.mark.parametrize("name", list(SPLITS))
def test_batches_are_pure_functions_of_seed_and_index(name):
    space = preset(name)
    a, b = make_batch(space, 1, 5), make_batch(space, 1, 5)
    assert torch.equal(a.input, b.input) and torch.equal(a.target, b.target)
    assert not torch.equal(make_batch(space, 1, 6).input, a.input)
    assert not torch.equal(make_batch(space, 2, 5).input, a.input)
    held = heldout_batches(space, 2)
    assert len(held) == 2 and held[0].input.shape == a.input.shape
    assert not torch.equal(held[0].input, a.input)


def test_reversal_batch_layout():
    space = preset("tiny-transformer")
    (src, dec_in), target = make_batch(space, 0, 3)
    assert src.shape == (space.batch_size, space.model["seq_len"]) and src.dtype == torch.int64
    for i in range(src.shape[0]):
        n = int(src[i].ne(PAD).sum())
        assert n >= 1 and src[i, n:].eq(PAD).all() and src[i, :n].ge(2).all()
        assert torch.equal(target[i, :n], src[i, :n].flip(0)) and target[i, n:].eq(PAD).all()
        assert dec_in[i, 0] == BOS and torch.equal(dec_in[i, 1:], target[i, :-1])


def test_digits_batch_layout():
    space = preset("digits-cnn")
    x, y = make_batch(space, 0, 0)
    assert x.shape == (space.batch_size, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (space.batch_size,) and int(y.max()) < 10
    held = heldout_batches(space)
    assert sum(len(b.target) for b in held) == int(1797 * 0.2)
    with pytest.raises(ValueError, match="held-out"):
        heldout_batches(space, 1000)


def test_message_shapes_and_encoder_pad_invariant():
    space = preset("tiny-transformer")
    d = space.model["d_model"]
    batch = make_batch(space, 0, 0)
    subnet = UniformStream(space, 0, 1)[0]
    st0 = build_stage(space, range(0, 5), 0, FROZEN)  # embed + 4 encoder blocks
    msg = st0(batch.input, subnet)
    assert msg.shape == (2, space.batch_size, space.model["seq_len"], d) and msg.dtype == torch.float32
    pads = batch.input[0].eq(PAD)
    assert msg[0][pads].eq(0).all() and msg[0][~pads].ne(0).any(-1).all()
    logits = build_stage(space, range(5, 10), 0, FROZEN)(msg, subnet)
    assert logits.shape == (space.batch_size, space.model["seq_len"], space.model["vocab"])


@pytest.mark.parametrize("choice", range(6))
def test_decoder_is_causal_and_encoder_ignores_pads(choice):
    space = preset("tiny-transformer")
    model = build_stage(space, range(space.num_blocks), 0, FROZEN)
    subnet = (0,) + (choice,) * 8 + (0,)
    (src, dec_in), _ = make_batch(space, 0, 1)
    base = model(torch.stack([src, dec_in]), subnet)
    changed = dec_in.clone()
    changed[:, 6:] = 2
    out = model(torch.stack([src, changed]), subnet)
    assert torch.equal(out[:, :6], base[:, :6]) and not torch.equal(out, base)
    # source pads are masked: cutting the padded tail off changes nothing (up to float reassociation)
    n0 = int(src[0].ne(PAD).sum())
    full = model(torch.stack([src[:1], dec_in[:1]]), subnet)[0, :n0]
    cut = model(torch.stack([src[:1, :n0], dec_in[:1, :n0]]), subnet)[0]
    torch.testing.assert_close(cut, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(SPLITS))
def test_fixed_params_override(name):
    space = preset(name)
    model = build_stage(space, range(space.num_blocks), 0, SharedLayers("delayed", 1))
    x = input_of(space, make_batch(space, 0, 0))
    subnet = UniformStream(space, 0, 1)[0]
    fixed = model.fixed_named_parameters()
    assert set(fixed) == {n for n in model.global_named_parameters()
                          if n.split(".")[0] in {space.blocks[b].name for b in space.fixed_blocks}}
    base = model(x, subnet)
    same = model(x, subnet, fixed_params={n: p.detach().clone() for n, p in fixed.items()})
    assert torch.equal(base, same)
    moved = {n: p.detach() + 0.01 for n, p in fixed.items()}
    assert not torch.equal(model(x, subnet, fixed_params=moved), base)
    with pytest.raises(KeyError, match="lacks"):
        model(x, subnet, fixed_params={})


def test_frozen_fixed_blocks_pass_gradients_but_get_none():
    space = preset("digits-cnn")
    model = build_stage(space, range(space.num_blocks), 0, FROZEN)
    subnet = (0, 0, 1, 2, 3, 4, 5, 0)
    batch = make_batch(space, 0, 0)
    model.loss(model(batch.input, subnet), batch.target).backward()
    assert all(p.grad is None and not p.requires_grad for p in model.fixed_named_parameters().values())
    assert all(p.grad is not None for p in model.subnet_parameters(subnet))  # cell0 is before the head
    used = {id(p) for p in model.subnet_parameters(subnet)}
    assert all(p.grad is None for p in model.parameters() if id(p) not in used)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_optimizer_touches_only_used_candidates(optimizer):
    space = preset("digits-cnn")
    model = build_stage(space, range(space.num_blocks), 0, SharedLayers("serial"))
    opt = make_optimizer(model.parameters(), optimizer, 0.05)
    assert all(g["foreach"] is False for g in opt.param_groups)
    before = _snap(model.global_named_parameters())
    subnet = (0, 1, 1, 1, 1, 1, 1, 0)
    for j in range(2):
        batch = make_batch(space, 0, j)
        opt.zero_grad(set_to_none=True)
        model.loss(model(batch.input, subnet), batch.target).backward()
        model.candidate_parameters(2, 0)[0].grad = torch.ones_like(model.candidate_parameters(2, 0)[0])
        keep_grads_of(model.parameters(), model.subnet_parameters(subnet)
                      + list(model.fixed_named_parameters().values()))
        opt.step()
    after = model.global_named_parameters()
    for n, p in after.items():
        used = n.startswith(("stem.", "head.")) or n.split(".")[1] == "conv5"
        assert torch.equal(p, before[n]) != used, n
        assert (len(opt.state.get(p, {})) > 0) == used or optimizer == "sgd", n


def test_make_optimizer_errors():
    p = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        make_optimizer(p, "lamb", 0.1)
    with pytest.raises(ValueError, match="learning rate"):
        make_optimizer(p, "sgd", 0.0)
    with pytest.raises(ValueError, match="foreach=False"):
        make_optimizer(p, "sgd", 0.1, foreach=True)
    assert make_optimizer(p, "momentum").param_groups[0]["momentum"] == 0.9


def test_evaluate_whole_model_only():
    space = preset("digits-cnn")
    model = build_stage(space, range(space.num_blocks), 0, FROZEN)
    before = param_hashes(model.global_named_parameters())
    r = evaluate(model, (0,) * space.num_blocks, heldout_batches(space, 2))
    assert set(r) == {"loss", "accuracy"} and r["loss"] > 0 and 0 <= r["accuracy"] <= 1
    assert param_hashes(model.global_named_parameters()) == before
    with pytest.raises(ValueError, match="whole model"):
        evaluate(build_stage(space, range(0, 4), 0, FROZEN), (0,) * space.num_blocks, [])
