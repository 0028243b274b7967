"""The transport's one-transfer-per-message packing (``naspipe.runtime.transport.comm.Packing``): both ends agree on
every transfer's size, payloads arrive bit for bit, and a message whose payload keeps its size is one transfer."""

from __future__ import annotations

import queue

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.cli import main
from naspipe.runtime.stagerun import StageRun
from naspipe.runtime.transport.comm import (
    ACTIVATION,
    DTYPES,
    GRADIENT,
    HEADER_BYTES,
    PACK_LIMIT,
    Links,
    Packing,
    encode_header,
)
from tests.helpers.gloo_pair import run_pair

SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
MESSAGES = st.lists(st.one_of(st.none(), st.tuples(st.sampled_from(DTYPES), SHAPES)), min_size=1, max_size=12)


def _tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (max(1, torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size(),),
                        dtype=torch.uint8, generator=g)  # any bits, NaN patterns included
    n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    t = raw[:n].view(dtype).reshape(shape) if n else torch.empty(shape, dtype=dtype)
    if dtype == torch.bool:
        t = t.view(torch.uint8).remainder(2).view(torch.bool).reshape(shape)
    return t


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


@settings(max_examples=150, deadline=None)
@given(MESSAGES)
def test_sender_and_receiver_agree_on_every_transfer_and_payloads_keep_their_bits(msgs):
    tx, rx = Packing(), Packing()
    totals = []
    for j, m in enumerate(msgs):
        t = None if m is None else _tensor(*m, seed=j)
        header = torch.tensor(encode_header(ACTIVATION, j, t, False, 0.25), dtype=torch.int64)
        awaited = rx.size
        assert tx.size == awaited
        total = HEADER_BYTES + (0 if t is None else t.numel() * t.element_size())
        # the receiver awaits a message's size only after two in a row had it: else the header alone
        steady = len(totals) >= 2 and totals[-1] == totals[-2]
        assert awaited == (totals[-1] if steady else HEADER_BYTES)
        buf, apart = tx.pack(header, t)
        assert buf.dtype == torch.uint8 and buf.numel() == awaited  # exactly what the receiver posted
        values, payload, sent_apart = rx.unpack(buf.clone())
        assert sent_apart == (total != awaited)
        assert (apart is not None) == (sent_apart and t is not None)
        if apart is not None:
            payload.copy_(apart)
        assert values[:2] == [ACTIVATION, j]
        if t is None:
            assert payload is None
        else:
            assert payload.dtype == t.dtype and payload.shape == t.shape
            assert torch.equal(_bits(payload), _bits(t))
        totals.append(total)


def test_a_message_of_the_steady_size_is_one_transfer_and_changing_sizes_send_no_padding():
    tx = Packing()
    x = torch.randn(16, 12, 32)

    def send(j: int, t: torch.Tensor | None) -> tuple[int, bool]:
        buf, apart = tx.pack(torch.tensor(encode_header(GRADIENT, j, t), dtype=torch.int64), t)
        return buf.numel(), apart is not None

    assert [send(j, x) for j in range(2)] == [(HEADER_BYTES, True)] * 2  # two in a row set the size
    steady = HEADER_BYTES + x.numel() * 4
    assert [send(j, torch.randn(16, 12, 32)) for j in range(2, 6)] == [(steady, False)] * 4
    assert send(6, None) == (steady, False)  # one change: the header padded to the awaited size, once
    # sizes that keep changing: the header alone, then the payload (no padding)
    assert [send(j, x if j % 2 else None) for j in range(7, 13)] == [(HEADER_BYTES, j % 2 == 1) for j in range(7, 13)]


def test_a_payload_over_the_limit_always_goes_apart_without_a_copy():
    tx = Packing()
    big = torch.zeros(PACK_LIMIT // 4 + 1)
    for j in range(4):
        buf, apart = tx.pack(torch.tensor(encode_header(ACTIVATION, j, big), dtype=torch.int64), big)
        assert buf.numel() == HEADER_BYTES and apart is big


def test_a_message_that_does_not_match_its_header_is_refused():
    tx, rx = Packing(), Packing()
    x = torch.randn(3)
    for j in range(2):
        buf, _ = tx.pack(torch.tensor(encode_header(ACTIVATION, j, x), dtype=torch.int64), x)
        rx.unpack(buf)
    buf, apart = tx.pack(torch.tensor(encode_header(ACTIVATION, 2, x), dtype=torch.int64), x)
    assert apart is None
    with pytest.raises(RuntimeError, match="announces"):
        rx.unpack(buf[:-4])


# ---- through gloo, two processes -------------------------------------------------------------------------
_G = torch.Generator().manual_seed(0)  # (the started processes import this module again: the same tensors)
ACTS = [torch.randn(4, 3, generator=_G) for _ in range(4)] + [
    torch.arange(5), torch.tensor([True, False, True]), torch.randn(2, 2, dtype=torch.float64, generator=_G),
    torch.randn(2, 2, dtype=torch.float64, generator=_G), torch.randn(2, 2, dtype=torch.float64, generator=_G),
    torch.randn(4, 3, generator=_G)]
GRADS = [torch.randn(4, 3, generator=_G) for _ in range(3)] + [None] * 3 + [torch.randn(4, 3, generator=_G)] + [
    torch.randn(7, generator=_G) for _ in range(3)]


def _wire(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (str(t.dtype), tuple(t.shape), bytes(_bits(t).tolist()))


def _pair(rank: int, port: int, out: mp.Queue) -> None:  # (a process of the fork server: module level)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        inbox: queue.Queue = queue.Queue()
        links = Links(StageRun.local(rank, 2, "csp"), len(ACTS), inbox, 30.0)
        links.start()
        got = []
        for j in range(len(ACTS)):
            if rank == 0:
                links.send_activation(j, ACTS[j], False)
            else:
                got.append(inbox.get(timeout=30))
                links.send_gradient(j, GRADS[j], loss=float(j))
            if rank == 0:
                got.append(inbox.get(timeout=30))
        links.flush()
        links.join(30.0)
        out.put((rank, [(m.kind, m.subnet, _wire(m.tensor), m.loss) for m in got]))
    finally:
        dist.destroy_process_group()


def test_messages_of_changing_shapes_and_dtypes_cross_gloo_intact():
    got, codes = run_pair(_pair, results=2)
    res = dict(got)
    assert codes == [0, 0]
    assert res[1] == [(ACTIVATION, j, _wire(t), None) for j, t in enumerate(ACTS)]
    assert res[0] == [(GRADIENT, j, _wire(t), float(j)) for j, t in enumerate(GRADS)]


# ---- integer messages between stages (tests/helpers/hunt_supernets.py) ----
def _hunt(function: str, n: int = 6, *extra: str) -> list[str]:
    """``--space hunt_supernets:FUNCTION`` (``tests/helpers/hunt_supernets.py``) with ``n`` subnets."""
    return ["--space", f"hunt_supernets:{function}", "--subnets", str(n), "--no-progress", *extra]


@pytest.mark.usefixtures("no_process_left_behind")
@pytest.mark.parametrize("policy", ["csp", "csp-bw"])
def test_integer_messages_between_stages_carry_no_gradient_and_match_the_reference(tmp_path, capsys, policy):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", *_hunt("int_message", 10), "--out", str(ref)]) == 0, capsys.readouterr().err
    assert main(["train", *_hunt("int_message", 10), "--stages", "4", "--policy", policy, "--out", str(run)]) == 0, \
        capsys.readouterr().err
    assert main(["verify", str(run), str(ref)]) == 0
