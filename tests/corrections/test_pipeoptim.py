"""PipeOptim weight prediction: formulas per optimizer, exactness where it must be exact, swap and restore."""

from __future__ import annotations

import copy

import pytest
import torch

from naspipe.corrections.pipeoptim import (
    needs_last_grad,
    predict,
    predicted_weights,
    prediction_direction,
    remember_grads,
    version_gap,
)
from naspipe.corrections.toy import pipeoptim_gaps, train_toy_pipeline
from naspipe.models.optim import OPTIMIZERS, make_optimizer


def _trained(name: str, steps: int = 3, seed: int = 0, **kw) -> tuple[torch.nn.Parameter, torch.optim.Optimizer]:
    """A float64 parameter after ``steps`` optimizer steps on random gradients (``.grad`` = the last one)."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(5, 3, generator=gen, dtype=torch.float64))
    opt = make_optimizer([p], name, 0.05, **kw)
    for _ in range(steps):
        p.grad = torch.randn(5, 3, generator=gen, dtype=torch.float64)
        opt.step()
    return p, opt


def test_version_gap() -> None:
    assert [version_gap(i, 4) for i in range(4)] == [3, 2, 1, 0]
    assert [version_gap(i, 4, offset=1) for i in range(4)] == [4, 3, 2, 1]  # the authors' code: P - i
    assert pipeoptim_gaps(3, -5) == [0, 0, 0]
    with pytest.raises(ValueError):
        version_gap(4, 4)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_s_zero_leaves_the_weights_bit_identical(name: str) -> None:
    p, opt = _trained(name)
    before = p.detach().clone()
    with predicted_weights([p], opt, 0) as inside:
        assert inside[0] is p and torch.equal(p, before)
    assert torch.equal(p, before)
    assert torch.equal(predict([p], opt, 0)[0], before)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_prediction_moves_and_restores_exactly(name: str) -> None:
    p, opt = _trained(name)
    real = p.detach().clone()
    expected = predict([p], opt, 3)[0]
    assert not torch.equal(expected, real)
    with predicted_weights([p], opt, 3):
        assert torch.equal(p.detach(), expected)
    assert torch.equal(p.detach(), real)


def test_plain_sgd_on_a_linear_loss_predicts_exactly() -> None:
    """Loss sum(c * W): the gradient is the constant c, so s more SGD steps reach W - lr*s*c. With dyadic
    numbers every operation is exact and the prediction is bit-identical to the weights really reached."""
    c = torch.tensor([[0.5, -0.25], [1.0, 0.125]], dtype=torch.float64)
    p = torch.nn.Parameter(torch.tensor([[1.0, 2.0], [-3.0, 0.5]], dtype=torch.float64))
    opt = make_optimizer([p], "sgd", 0.125)
    p.grad = c.clone()
    opt.step()
    for s in range(6):
        pred = predict([p], opt, s)[0]
        q = torch.nn.Parameter(p.detach().clone())
        o = make_optimizer([q], "sgd", 0.125)
        for _ in range(s):
            q.grad = c.clone()
            o.step()
        assert torch.equal(pred, q.detach()), s


def test_plain_sgd_on_a_random_linear_loss_predicts_to_rounding() -> None:
    gen = torch.Generator().manual_seed(1)
    c = torch.randn(7, generator=gen, dtype=torch.float64)
    p = torch.nn.Parameter(torch.randn(7, generator=gen, dtype=torch.float64))
    opt = make_optimizer([p], "sgd", 0.03)
    for _ in range(2):
        p.grad = None
        (p * c).sum().backward()
        opt.step()
    grads = remember_grads([p])
    pred = predict([p], opt, 5, grads)[0]
    for _ in range(5):
        p.grad = None
        (p * c).sum().backward()
        opt.step()
    torch.testing.assert_close(pred, p.detach(), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_on_a_linear_loss_predicts_to_rounding(name: str) -> None:
    """Constant gradient g: m_hat = g and v_hat = g*g at every step, so each step moves lr*g/(|g|+eps) and
    the prediction of s steps is exact up to rounding (weight decay 0: it is left out of the prediction)."""
    gen = torch.Generator().manual_seed(2)
    c = torch.randn(6, generator=gen, dtype=torch.float64)
    p = torch.nn.Parameter(torch.randn(6, generator=gen, dtype=torch.float64))
    opt = make_optimizer([p], name, 0.01, weight_decay=0.0)
    for _ in range(3):
        p.grad = c.clone()
        opt.step()
    pred = predict([p], opt, 4)[0]
    for _ in range(4):
        p.grad = c.clone()
        opt.step()
    torch.testing.assert_close(pred, p.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("name", "kw"), [
    ("sgd", {}), ("momentum", {}), ("momentum", {"dampening": 0.3}), ("momentum", {"nesterov": True}),
    ("sgd", {"maximize": True}),
])
def test_direction_is_the_next_step_when_the_next_gradient_repeats(name: str, kw: dict) -> None:
    """For the SGD family dW is the direction torch's next step takes if the next gradient equals the last
    one: one real step with that gradient moves exactly lr * dW."""
    p, opt = _trained(name, **kw)
    d = prediction_direction(p, opt, p.grad)
    q = copy.deepcopy(p)
    o = copy.deepcopy(opt)  # deep-copies state and param groups together
    q2 = o.param_groups[0]["params"][0]
    q2.grad = p.grad.clone()
    before = q2.detach().clone()
    o.step()
    torch.testing.assert_close((before - q2.detach()) / 0.05, d, rtol=1e-12, atol=1e-12)
    del q


@pytest.mark.parametrize(("kw", "centered"), [({}, False), ({"centered": True}, True), ({"momentum": 0.5}, False)])
def test_rmsprop_direction_formula(kw: dict, centered: bool) -> None:
    """grad / (sqrt(square_avg) + eps) with the *current* square_avg (the authors' formula; torch's next step
    would first fold the new gradient into square_avg); centered subtracts grad_avg**2 under the root;
    momentum adds mom * buf."""
    p, opt = _trained("rmsprop", **kw)
    st, g = opt.state[p], p.grad
    sq = st["square_avg"] - st["grad_avg"] ** 2 if centered else st["square_avg"]
    expected = g / (sq.sqrt() + opt.param_groups[0]["eps"])
    if "momentum" in kw:
        expected = kw["momentum"] * st["momentum_buffer"] + expected
    torch.testing.assert_close(prediction_direction(p, opt, g), expected, rtol=1e-15, atol=0)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_direction_formula(name: str) -> None:
    """m_hat / (sqrt(v_hat) + eps) with bias correction at the current step: the direction of the last step
    (with weight decay 0)."""
    p, opt = _trained(name, steps=4, weight_decay=0.0)
    st = opt.state[p]
    step = float(st["step"])
    b1, b2 = opt.param_groups[0]["betas"]
    m_hat = st["exp_avg"] / (1 - b1 ** step)
    v_hat = st["exp_avg_sq"] / (1 - b2 ** step)
    expected = m_hat / (v_hat.sqrt() + opt.param_groups[0]["eps"])
    torch.testing.assert_close(prediction_direction(p, opt), expected, rtol=1e-15, atol=0)
    # ... which is the direction the last step moved
    before = p.detach().clone()
    p.grad = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    opt.step()
    torch.testing.assert_close((before - p.detach()) / 0.05, prediction_direction(p, opt), rtol=1e-10, atol=1e-12)


def test_missing_information_means_no_move() -> None:
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    for name in OPTIMIZERS:
        opt = make_optimizer([p], name, 0.1)
        assert prediction_direction(p, opt) is None  # never stepped, no gradient
        assert torch.equal(predict([p], opt, 4)[0], p.detach())
    p, opt = _trained("momentum")
    p.grad = None  # the runtime cleared it: the gradient term counts as zero, the momentum term remains
    buf = opt.state[p]["momentum_buffer"]
    torch.testing.assert_close(prediction_direction(p, opt), 0.9 * buf)


def test_needs_last_grad_and_remember_grads() -> None:
    assert [needs_last_grad(_trained(n, steps=1)[1]) for n in OPTIMIZERS] == [True, True, False, False, True]
    p, _ = _trained("sgd", steps=1)
    q = torch.nn.Parameter(torch.zeros(2))
    kept = remember_grads([p, q])
    assert kept[1] is None and torch.equal(kept[0], p.grad) and kept[0] is not p.grad


def test_unsupported_optimizer_is_refused_and_nothing_moves() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adagrad([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    before = p.detach().clone()
    with pytest.raises(TypeError, match="Adagrad"), predicted_weights([p], opt, 2):
        pass
    assert torch.equal(p.detach(), before)


def test_forward_sees_the_prediction_backward_sees_the_real_weights() -> None:
    """The swap goes through ``.data``: autograd's version counters do not change, the graph built inside
    the block stays valid, and the backward (after the block) reads the restored real weights."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2).double()
    opt = make_optimizer(lin.parameters(), "momentum", 0.1)
    x = torch.randn(4, 3, dtype=torch.float64)
    lin(x).pow(2).sum().backward()
    opt.step()
    params = list(lin.parameters())
    real = [q.detach().clone() for q in params]
    w_hat, b_hat = predict(params, opt, 2)
    xin = x.clone().requires_grad_(True)
    with predicted_weights(params, opt, 2):
        out = lin(xin)
    torch.testing.assert_close(out, xin @ w_hat.T + b_hat)
    assert all(torch.equal(q.detach(), r) for q, r in zip(params, real, strict=True))
    out.sum().backward()
    torch.testing.assert_close(xin.grad, torch.ones(4, 2, dtype=torch.float64) @ real[0])


def test_pipeoptim_with_s_zero_is_no_stash_asynchrony() -> None:
    """The toy asynchronous 1F1B pipeline (``naspipe.corrections.toy``) with every forward under
    ``predicted_weights(s=0)`` trains bit-identically to the same pipeline without prediction."""
    for name in ("momentum", "adam"):
        plain = train_toy_pipeline(4, 60, 0.02, optimizer=name)
        zero = train_toy_pipeline(4, 60, 0.02, optimizer=name, predict_gaps=[0, 0, 0, 0])
        assert plain.losses == zero.losses
        assert all(torch.equal(a, b) for a, b in zip(plain.weights, zero.weights, strict=True))


def test_pipeoptim_rescues_momentum_sgd_where_asynchrony_diverges() -> None:
    """SGD with momentum 0.9, lr 0.08, 4 stages, constant rate: asynchrony without stashing blows up,
    predicting each forward's weights s = P-1-i updates ahead converges."""
    plain = train_toy_pipeline(4, 1000, 0.08, optimizer="momentum")
    pred = train_toy_pipeline(4, 1000, 0.08, optimizer="momentum", predict_gaps=pipeoptim_gaps(4))
    assert plain.losses[-1] > 1e6 * plain.losses[0]
    assert not pred.diverged and pred.losses[-1] < 1e-20 * pred.losses[0]


def test_plain_sgd_prediction_extrapolates_a_stale_gradient() -> None:
    """A measured caveat, kept in the module docstring: with plain SGD the last gradient is itself stale, and
    extrapolating it s steps lowers the stable step (lr 0.5, 4 stages: asynchrony converges, prediction
    blows up)."""
    plain = train_toy_pipeline(4, 600, 0.5)
    pred = train_toy_pipeline(4, 600, 0.5, predict_gaps=pipeoptim_gaps(4))
    assert not plain.diverged and plain.losses[-1] < 1e-20
    assert pred.diverged
