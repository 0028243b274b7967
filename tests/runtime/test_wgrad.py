"""Explicit weight gradients (``naspipe.runtime.split_backward.wgrad``) and the split backward on odd layer types.

* unit: for Linear (2-d, 3-d, 4-d, contiguous or not, with and without bias), LayerNorm (with and without
  bias) and Conv1d/Conv2d (padding, reflect padding, dilation, stride, groups, without bias), on contiguous and
  non-contiguous inputs and gradients, the explicit gradient has the bits of autograd's; a layer without a
  rule (Embedding, a Linear subclass with its own forward, GroupNorm) has no recipe; a plain Linear is
  recognised from its addmm/mm node without the general graph walk; a weight with a gradient hook, a
  broadcast bias and a Linear under autocast have no recipe (W asks autograd: with the hook the split then
  equals a full backward);
* split backward on every preset with a torch model and on a user supernet with odd layers (a Linear
  called twice, a Linear subclass, a parameter used directly, GroupNorm, PReLU, Bilinear, a grouped dilated
  Conv1d, a Linear on a non-contiguous input): ``B`` then ``W`` equals one full backward bit for bit, and the
  presets' layer calls all take the explicit path.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from naspipe.models import build_stage, input_of, make_batch, target_of
from naspipe.runtime.split_backward.splitgrad import BlockTargets, LayerCapture, input_grad, weight_grads
from naspipe.runtime.split_backward.wgrad import recipe
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import resolve_space


def _input(shape: tuple[int, ...], contiguous: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(len(shape))
    if contiguous:
        return torch.randn(*shape, generator=g)
    if len(shape) == 2:  # every other column of a wider tensor
        return torch.randn(shape[0], 2 * shape[1], generator=g)[:, ::2]
    return torch.randn(shape[1], shape[0], *shape[2:], generator=g).transpose(0, 1)


LAYERS = [
    *[(lambda b=b: nn.Linear(16, 24, bias=b), shape, c)
      for b in (True, False) for shape in ((37, 16), (5, 13, 16), (2, 5, 13, 16)) for c in (True, False)],
    (lambda: nn.LayerNorm(16), (5, 13, 16), True),
    (lambda: nn.LayerNorm(16, bias=False), (40, 16), False),
    (lambda: nn.LayerNorm((13, 16)), (5, 13, 16), True),
    (lambda: nn.Conv1d(16, 16, 3), (5, 16, 13), True),
    (lambda: nn.Conv1d(16, 8, 3, stride=2, dilation=2, padding=1, groups=4, bias=False), (5, 16, 13), False),
    (lambda: nn.Conv2d(8, 8, 3, padding=1, groups=8), (16, 8, 8, 8), True),
    (lambda: nn.Conv2d(1, 8, 3, padding="same"), (16, 1, 8, 8), True),
    (lambda: nn.Conv2d(4, 4, 2, padding="same", padding_mode="reflect"), (6, 4, 7, 7), False),
]


@pytest.mark.parametrize("make,shape,contiguous", LAYERS)
def test_explicit_weight_gradients_have_the_bits_of_autograd(make, shape, contiguous):
    torch.manual_seed(3)
    mod = make()
    for p in mod.parameters():  # LayerNorm starts at ones/zeros: make its weights general
        nn.init.normal_(p)
    x = _input(shape, contiguous).requires_grad_(True)
    out = mod(x)
    ws = [p for p in mod.parameters()]
    rec = recipe(mod, x, out, ws)
    assert rec is not None
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    if not contiguous and g.dim() >= 3:  # the gradient of a transposed output arrives non-contiguous
        g = g.transpose(0, 1).contiguous().transpose(0, 1)
    want = torch.autograd.grad(out, [x, *ws], g, retain_graph=True)[1:]
    with torch.no_grad():
        got = rec(g)
    assert len(got) == len(ws)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)
    # a subset of the weights (the others frozen) comes back in the order asked
    if len(ws) == 2:
        got = recipe(mod, x, out, ws[::-1])(g)  # type: ignore[misc]
        assert torch.equal(got[0], want[1]) and torch.equal(got[1], want[0])


class _Doubled(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


@pytest.mark.parametrize("mod,x", [
    (nn.Embedding(10, 4), torch.tensor([[1, 2], [3, 4]])),
    (_Doubled(4, 4), torch.randn(3, 4, requires_grad=True)),
    (nn.GroupNorm(2, 4), torch.randn(3, 4, 5, requires_grad=True)),
])
def test_layers_without_a_rule_have_no_recipe(mod, x):
    out = mod(x)
    assert recipe(mod, x, out, list(mod.parameters())) is None


@pytest.mark.parametrize("wrap", [nn.utils.spectral_norm, nn.utils.parametrizations.spectral_norm,
                                  nn.utils.parametrizations.weight_norm])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_a_linear_whose_weight_is_computed_from_a_parameter_has_no_recipe(wrap, shape):
    """spectral or weight norm: the weight the call used is computed from the parameter; assigning its gradient
    to the parameter would be wrong (W then falls back to autograd, which applies the chain rule)."""
    mod = wrap(nn.Linear(4, 4))
    x = torch.randn(*shape, requires_grad=True)
    out = mod(x)
    params = [p for p in mod.parameters() if p.dim() == 2] + [mod.bias]
    assert recipe(mod, x, out, params) is None
    assert recipe(mod, x, out, [mod.bias]) is not None  # the bias is used as it is


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 16), (5, 13, 16), (2, 5, 13, 16)])
def test_a_plain_linear_is_recognised_without_walking_its_graph(monkeypatch, bias, shape):
    """W asks once per layer call: a Linear whose weight and bias are used as they are (contiguous input, with
    or without bias) is recognised from its addmm/mm node directly, not by the general walk."""
    import naspipe.runtime.split_backward.wgrad as wgrad

    def walk(*args: object) -> bool:
        raise AssertionError("walked the graph")

    monkeypatch.setattr(wgrad, "_reaches_leaves", walk)
    mod = nn.Linear(16, 8, bias=bias)
    x = torch.randn(*shape, requires_grad=True)
    out = mod(x)
    assert recipe(mod, x, out, list(mod.parameters())) is not None
    assert recipe(mod, x, out, list(mod.parameters())[::-1]) is not None


@pytest.mark.parametrize("make,shape", [(lambda: nn.Linear(4, 3), (5, 4)), (lambda: nn.LayerNorm(4), (5, 4)),
                                        (lambda: nn.Conv1d(2, 2, 3), (5, 2, 7))])
def test_a_weight_with_a_gradient_hook_takes_autograds_path(make, shape):
    """``register_hook`` on a weight changes the gradient autograd delivers; the explicit kernels would skip the
    hook, so such a call has no recipe and W asks autograd (which applies it)."""
    mod = make()
    mod.weight.register_hook(lambda g: g * 2)
    x = torch.randn(*shape, requires_grad=True)
    out = mod(x)
    assert recipe(mod, x, out, [mod.weight, mod.bias]) is None
    assert recipe(mod, x, out, [mod.bias]) is not None  # the bias has no hook


def test_a_split_with_a_hooked_weight_equals_one_full_backward():
    """B then W against one full backward on a net whose last Linear's weight doubles its gradient in a hook
    (the explicit kernels ignored the hook: W gave half the gradient)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    net[2].weight.register_hook(lambda g: g * 2)
    x0 = torch.randn(5, 4)
    capture = LayerCapture(net)

    def run(layers: list | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        x = x0.clone().requires_grad_(True)
        capture.active = layers
        try:
            return x, net(x).square().sum()
        finally:
            capture.active = None

    x, out = run()
    out.backward()
    want, want_in = [p.grad.clone() for p in net.parameters()], x.grad
    net.zero_grad(set_to_none=True)
    layers: list = []
    x, out = run(layers)
    gin, seen = input_grad(out, x, None, [out, *(c.out for c in layers)])
    got = weight_grads([out], seen[:1], [list(net.parameters())], layers, seen[1:])
    assert torch.equal(gin, want_in)
    assert all(torch.equal(got[p], w) for p, w in zip(net.parameters(), want, strict=True))


@pytest.mark.parametrize("features,bias_shape", [(16, (1, 16)), (8, (1,))])
def test_a_linear_with_a_broadcast_bias_has_no_recipe(features, bias_shape):
    """A bias of another shape than (out_features,) broadcasts in ``F.linear``; its gradient is a sum the rule
    does not make (a (1, 16) bias on a square Linear passed for a weight), so autograd computes it."""
    mod = nn.Linear(16, features)
    mod.bias = nn.Parameter(torch.randn(*bias_shape))
    x = torch.randn(5, 16, requires_grad=True)
    out = mod(x)
    assert recipe(mod, x, out, [mod.weight, mod.bias]) is None
    assert recipe(mod, x, out, [mod.weight]) is not None


def test_a_linear_under_autocast_has_no_recipe():
    """Under autocast the addmm saved a cast of the input, not the input the call got: autograd computes the
    weight gradient (the rule's mm would mix dtypes and fail)."""
    mod = nn.Linear(4, 3).to(torch.bfloat16)
    x = torch.randn(5, 4, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mod(x)
    assert recipe(mod, x, out, [mod.weight, mod.bias]) is None


def _split_equals_full(space_name: str, shared: str, lo: int, subnets: int, seed: int = 4) -> tuple[int, int]:
    """Split B then W against one full backward on blocks [lo, end) of ``space_name``, bit for bit; returns
    (layer calls on the explicit path, layer calls with weights to differentiate)."""
    sp, sh = resolve_space(space_name), parse_shared(shared)
    model = build_stage(sp, range(lo, sp.num_blocks), seed, sh)
    head = build_stage(sp, range(0, lo), seed, sh)
    targets, capture = BlockTargets(model), LayerCapture(model)
    live_fixed = {n: p for n, p in model.fixed_named_parameters().items() if p.requires_grad}
    explicit = calls = checked = 0
    stream = UniformStream(sp, seed, subnets)
    for j in range(subnets):
        sub, batch = stream[j], make_batch(sp, seed, j)
        with torch.no_grad():
            x0 = head(input_of(sp, batch), sub)

        def run(blocks=None, layers=None, x0=x0, sub=sub, batch=batch):
            x = x0.detach().clone().requires_grad_(True)
            leaves = {n: p.detach().clone().requires_grad_(True) for n, p in live_fixed.items()} or None
            capture.active = layers
            try:
                out = model.loss(model(x, sub, leaves, capture=blocks), target_of(sp, batch))
            finally:
                capture.active = None
            return x, leaves, out

        x, leaves, out = run()
        out.backward()
        want = [[t.grad for t in ts] for ts in targets.targets(sub, leaves)]
        full_in = x.grad
        for p in model.parameters():
            p.grad = None
        blocks, layers = [], []
        x, leaves, out = run(blocks, layers)
        gin, seen = input_grad(out, x, None, [*blocks, *(c.out for c in layers)])
        ts = targets.targets(sub, leaves)
        assert all(t.grad is None for t in model.parameters()) and torch.equal(gin, full_in)
        got = weight_grads(blocks, seen[:len(blocks)], ts, layers, seen[len(blocks):])
        for tb, wb in zip(ts, want, strict=True):
            for t, w in zip(tb, wb, strict=True):
                assert (got[t] is None) == (w is None)
                if w is not None:
                    assert torch.equal(got[t], w)
                    checked += 1
        calls += sum(1 for c in layers if c.weights)  # (a frozen layer's call needs no gradient)
        explicit += sum(recipe(c.module, c.input, c.out, c.weights) is not None for c in layers if c.weights)
    capture.remove()
    assert checked > 0
    return explicit, calls


@pytest.mark.parametrize("space,lo", [("tiny-transformer", 1), ("digits-cnn", 1), ("sparse-mlp", 1)])
@pytest.mark.parametrize("shared", ["frozen", "delayed:2"])
def test_presets_split_bit_for_bit_on_the_explicit_path(space, lo, shared):
    explicit, calls = _split_equals_full(space, shared, lo, subnets=3)
    assert explicit == calls > 0


@pytest.mark.parametrize("shared", ["frozen", "delayed:2"])
def test_a_user_supernet_with_odd_layers_splits_bit_for_bit(shared):
    explicit, calls = _split_equals_full("user_supernets:odd", shared, 1, subnets=12)
    assert 0 < explicit < calls  # both paths were taken


def test_measured_costs_carry_the_input_gradient_share_the_simulator_splits_by():
    """``naspipe profile`` measures the split backward's B per candidate; the space built from the profile
    hands it to the cost model, so a simulated ``csp-bw`` uses the measured B and W."""
    import naspipe
    from naspipe.sched.tasks import BACKWARD, WEIGHT, Task
    from naspipe.sim.costs import CostModel
    from naspipe.supernet import load_spec

    sn = load_spec("user_supernets:good")
    costs = naspipe.measure_costs(sn, repeats=2)
    shares = {(b, n): c["bwd_input_share"] for b, cs in costs["candidates"].items() for n, c in cs.items()}
    assert all(0.0 <= v <= 1.0 for v in shares.values())
    assert shares[("inp", "inp")] == 0.0  # the batch input takes no gradient: B computes nothing
    assert all(v > 0 for (b, _), v in shares.items() if b != "inp")
    sp = naspipe.resolve_space(sn.with_costs(costs))
    cand = sp.blocks[1].candidates[0]
    assert cand.bwd_input_share == shares[("b0", cand.name)]
    part = naspipe.partition(sp, 2)
    subs = [tuple(0 for _ in range(sp.num_blocks))]
    cm = CostModel(sp, part, subs, split_backward=True)
    blocks = part.blocks(1)
    b, w = cm.duration(Task(BACKWARD, 0, 1)), cm.duration(Task(WEIGHT, 0, 1))
    assert b == pytest.approx(sum(sp.candidate(k, 0).bwd * sp.candidate(k, 0).bwd_input_share for k in blocks))
    assert b + w == pytest.approx(sum(sp.candidate(k, 0).bwd for k in blocks))
