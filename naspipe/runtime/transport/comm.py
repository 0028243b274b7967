"""Point-to-point transport between neighbouring stages: messages of a fixed-length int64 header and a payload.

Why it exists: stages run subnets out of order, so every message says which subnet it belongs to and
what its payload looks like. Activations travel ``s -> s+1``, gradients ``s+1 -> s``; nothing but
torch.distributed point-to-point ops is used (no sockets or pickles of our own).

Channels: one process group per direction of each neighbouring pair, created in the same order on every
rank. A channel carries messages one way, in FIFO order. On gloo that gives independent connections; on
NCCL separate communicators and streams, so a blocking receive on one channel can never hold up a send on
the other (NCCL orders all operations of one communicator).

Losses: a gradient message's header also carries the subnet's training loss as the bits of a float64
(``FLAG_LOSS``), so every stage learns loss(j) bit-exactly with the gradient of ``j`` (what a run-time
generated stream needs, ``naspipe.runtime.processes.online``).

One receiver thread per incoming channel blocks in ``dist.recv`` and pushes ``Message`` objects into the
stage's inbox (a ``queue.Queue``); it knows how many messages to expect (one per subnet) and ends by
itself. A receive error is pushed into the inbox as a ``ChannelFailure``. Sends are ``dist.isend`` from the
stage loop; their handles (and tensors) are kept until complete and awaited with a timeout in ``flush``.

One transfer per message where the size is steady (``Packing``): header and payload travel as ONE byte
buffer whose size both ends derive from the channel's previous messages. A point-to-point transfer completes
at once only where the receiver already waits for it; a payload sent after its header waits until the receiver
has read the header and asked for the payload, and the sender's transport thread, competing for a core with
the sender's next task, then writes it: on a busy 2-core machine that made a message take 1-2 ms at the
median instead of about 0.1 ms. Once two messages in a row had the same size (payload up to ``PACK_LIMIT``),
the receiver waits for that size; a message of another size then goes as the header alone in a buffer of the
awaited size (``FLAG_APART``) and its payload in a transfer of its own, and both ends fall back to awaiting
the header alone. Channels whose sizes keep changing therefore cost what two transfers per message cost;
large payloads always go apart (no copies).
"""

from __future__ import annotations

import datetime
import queue
import struct
import threading
from collections import deque
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from naspipe.runtime.stagerun import StageRun

HEADER_LEN = 13  # kind, subnet, flags, dtype, ndim, up to 7 dims, the subnet's loss (float64 bits)
MAX_DIMS = 7
ACTIVATION = 1
GRADIENT = 2
KIND_NAMES = {ACTIVATION: "activation", GRADIENT: "gradient"}
FLAG_REQUIRES_GRAD = 1  # the sender's tensor requires grad: the receiver mirrors it
FLAG_EMPTY = 2  # no payload follows (a gradient that does not exist)
FLAG_LOSS = 4  # the last field holds the subnet's training loss, the bits of a float64 (run-time streams)
FLAG_APART = 8  # the payload follows in a transfer of its own (the message does not have the channel's steady size)
# (codes are positions: append only) integer and bool messages carry no gradient (token ids between stages);
# no int16: NCCL has no such type
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)


class TransportError(RuntimeError):
    pass


@dataclass
class Message:
    kind: int  # ACTIVATION or GRADIENT
    subnet: int
    tensor: Tensor | None
    requires_grad: bool = False
    loss: float | None = None  # the subnet's loss, bit-exact (gradients carry it upstream)


@dataclass
class ChannelFailure:
    text: str
    peer: int | None = None  # the global rank at the other end of the channel


def _loss_bits(loss: float | None) -> tuple[int, int]:
    """``(flag, field)``: a float64 carried bit-exactly in an int64 header field."""
    if loss is None:
        return 0, 0
    return FLAG_LOSS, struct.unpack("<q", struct.pack("<d", float(loss)))[0]


def decode_loss(values: list[int]) -> float | None:
    """The loss a header carries (bit-exact), or None."""
    if not values[2] & FLAG_LOSS:
        return None
    return struct.unpack("<d", struct.pack("<q", int(values[HEADER_LEN - 1])))[0]


def encode_header(kind: int, subnet: int, tensor: Tensor | None, requires_grad: bool = False,
                  loss: float | None = None) -> list[int]:
    """The header of a message as a list of ``HEADER_LEN`` ints (``loss``: the subnet's loss, if known)."""
    lflag, lbits = _loss_bits(loss)
    if tensor is None:
        return [kind, subnet, FLAG_EMPTY | lflag, 0, 0] + [0] * MAX_DIMS + [lbits]
    if tensor.dtype not in DTYPES:
        raise TransportError(f"cannot send dtype {tensor.dtype}; supported: {', '.join(map(str, DTYPES))}")
    if tensor.dim() > MAX_DIMS:
        raise TransportError(f"cannot send a {tensor.dim()}-d tensor; at most {MAX_DIMS} dims")
    dims = list(tensor.shape) + [0] * (MAX_DIMS - tensor.dim())
    flags = (FLAG_REQUIRES_GRAD if requires_grad else 0) | lflag
    return [kind, subnet, flags, DTYPES.index(tensor.dtype), tensor.dim()] + dims + [lbits]


def decode_header(values: list[int]) -> tuple[int, int, int, torch.dtype | None, tuple[int, ...]]:
    """``(kind, subnet, flags, dtype, shape)``; dtype None for an empty message."""
    if len(values) != HEADER_LEN:
        raise TransportError(f"header has {len(values)} fields, expected {HEADER_LEN}")
    kind, subnet, flags, code, ndim = values[:5]
    if kind not in KIND_NAMES or subnet < 0 or not 0 <= ndim <= MAX_DIMS:
        raise TransportError(f"malformed header {values}")
    if flags & FLAG_EMPTY:
        return kind, subnet, flags, None, ()
    if not 0 <= code < len(DTYPES):
        raise TransportError(f"malformed header {values}: unknown dtype code {code}")
    return kind, subnet, flags, DTYPES[code], tuple(values[5:5 + ndim])  # (the loss: decode_loss)


HEADER_BYTES = HEADER_LEN * 8
PACK_LIMIT = 1 << 20  # larger payloads go apart: copying them into and out of one buffer would cost more than it saves


class Packing:
    """The byte size of a channel's next transfer, which sender and receiver derive alike from the messages
    so far: the size of the last message (header plus payload) once two in a row had it and it is at most
    ``PACK_LIMIT`` bytes of payload, else the header alone."""

    def __init__(self) -> None:
        self.size = HEADER_BYTES
        self._last: int | None = None

    def _advance(self, total: int) -> None:
        steady = total == self._last and total - HEADER_BYTES <= PACK_LIMIT
        self.size = total if steady else HEADER_BYTES
        self._last = total

    def pack(self, header: Tensor, payload: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The buffer to send now (``self.size`` bytes) and, where the message does not fit it, the payload
        to send after it (``FLAG_APART``; None for a message without payload)."""
        nbytes = 0 if payload is None else payload.numel() * payload.element_size()
        total = HEADER_BYTES + nbytes
        if total == self.size:
            buf = torch.empty(total, dtype=torch.uint8, device=header.device)
            buf[:HEADER_BYTES] = header.view(torch.uint8)
            if payload is not None:
                buf[HEADER_BYTES:] = payload.reshape(-1).view(torch.uint8)
            apart = None
        else:  # the header alone (padded to the size the receiver waits for), the payload in its own transfer
            buf = torch.zeros(self.size, dtype=torch.uint8, device=header.device)
            header = header.clone()
            header[2] |= FLAG_APART
            buf[:HEADER_BYTES] = header.view(torch.uint8)
            apart = payload
        self._advance(total)
        return buf, apart

    def unpack(self, buf: Tensor) -> tuple[list[int], Tensor | None, bool]:
        """``(header values, payload or None, apart)``: with ``apart`` the payload (allocated here) is still to
        be received, in a transfer of its own."""
        values = buf[:HEADER_BYTES].view(torch.int64).tolist()
        _, _, flags, dtype, shape = decode_header(values)
        payload = None if dtype is None else torch.empty(shape, dtype=dtype, device=buf.device)
        nbytes = 0 if payload is None else payload.numel() * payload.element_size()
        apart = bool(flags & FLAG_APART)
        if not apart:
            if HEADER_BYTES + nbytes != buf.numel():
                raise TransportError(f"a message of {buf.numel()} bytes announces a {nbytes}-byte payload")
            if payload is not None:
                payload.view(-1).view(torch.uint8).copy_(buf[HEADER_BYTES:])
        self._advance(HEADER_BYTES + nbytes)
        return values, payload, apart


def make_channels(world: int, replica: int = 0, replicas: int = 1
                  ) -> tuple[list[dist.ProcessGroup | None], list[dist.ProcessGroup | None]]:
    """Per pair ``(s, s+1)``: the activation group and the gradient group (collective: every rank calls).

    With data-parallel replicas (``world`` stages per replica, global rank ``replica * world + s``) every rank
    creates every replica's channels in the same order and keeps its own replica's."""
    acts: list[dist.ProcessGroup | None] = []
    grads: list[dist.ProcessGroup | None] = []
    for r in range(replicas):
        base = r * world
        for s in range(world - 1):
            a = dist.new_group([base + s, base + s + 1])
            g = dist.new_group([base + s, base + s + 1])
            if r == replica:
                acts.append(a)
                grads.append(g)
    return acts, grads


class Links:
    """The two neighbours of stage ``run.stage`` (in its replica's pipeline): receive threads into ``inbox``,
    asynchronous sends."""

    def __init__(self, run: StageRun, expected: int, inbox: queue.Queue, timeout: float):
        rank, world, device, replica, replicas = run.stage, run.stages, run.device, run.replica, run.replicas
        self.rank, self.world, self.device = rank, world, device
        # gloo's point-to-point ops move host memory only: CUDA stages on gloo (more stages than GPUs) stage
        # their messages through host memory; on NCCL they travel device to device
        cuda_on_gloo = device.type == "cuda" and dist.get_backend() != "nccl"
        self.wire = torch.device("cpu") if cuda_on_gloo else device
        self.base = replica * world  # the global rank of this replica's stage 0
        self.expected = expected
        self.inbox = inbox
        self.timeout = timeout
        self.act_groups, self.grad_groups = make_channels(world, replica, replicas)
        self._pending: deque[tuple[dist.Work, Tensor]] = deque()  # the tensor stays alive until sent
        self._packing = {(ACTIVATION, rank + 1): Packing(), (GRADIENT, rank - 1): Packing()}
        self._threads: list[threading.Thread] = []
        self.received = {ACTIVATION: 0, GRADIENT: 0}
        self.bytes_sent = 0

    # ---- receiving -------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.rank > 0:
            self._spawn(ACTIVATION, self.rank - 1, self.act_groups[self.rank - 1])
        if self.rank < self.world - 1:
            self._spawn(GRADIENT, self.rank + 1, self.grad_groups[self.rank])

    def _spawn(self, kind: int, src: int, group: dist.ProcessGroup | None) -> None:
        t = threading.Thread(target=self._receive, args=(kind, src, group), daemon=True,
                             name=f"naspipe-recv-{KIND_NAMES[kind]}-from-{src}")
        t.start()
        self._threads.append(t)

    def _receive(self, kind: int, src: int, group: dist.ProcessGroup | None) -> None:
        what = f"{KIND_NAMES[kind]}s from stage {src}"
        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)  # the current device is per thread
            packing = Packing()
            for _ in range(self.expected):
                buf = torch.empty(packing.size, dtype=torch.uint8, device=self.wire)
                dist.recv(buf, src=self.base + src, group=group)
                values, payload, apart = packing.unpack(buf)
                k, j, flags = values[0], values[1], values[2]
                if k != kind:
                    raise TransportError(f"expected a {KIND_NAMES[kind]}, got a {KIND_NAMES[k]} header")
                if apart and payload is not None:
                    dist.recv(payload, src=self.base + src, group=group)
                if payload is not None:
                    payload = payload.to(self.device)  # (a no-op unless staged through host memory)
                self.received[kind] += 1
                self.inbox.put(Message(kind, j, payload, bool(flags & FLAG_REQUIRES_GRAD), decode_loss(values)))
        except Exception as e:  # noqa: BLE001 - reported to the stage loop, which fails the run
            self.inbox.put(ChannelFailure(f"stage {self.rank}: receiving {what} failed after "
                                          f"{self.received[kind]} of {self.expected}: {type(e).__name__}: {e}",
                                          self.base + src))

    # ---- sending ---------------------------------------------------------------------------------------
    def send_activation(self, subnet: int, tensor: Tensor, requires_grad: bool) -> None:
        self._send(ACTIVATION, self.rank + 1, self.act_groups[self.rank], subnet, tensor, requires_grad)

    def send_gradient(self, subnet: int, tensor: Tensor | None, loss: float | None = None) -> None:
        """Send ``subnet``'s input gradient upstream, with its loss when known (bit-exact, in the header)."""
        self._send(GRADIENT, self.rank - 1, self.grad_groups[self.rank - 1], subnet, tensor, False, loss)

    def _send(self, kind: int, dst: int, group: dist.ProcessGroup | None, subnet: int, tensor: Tensor | None,
              requires_grad: bool, loss: float | None = None) -> None:
        self._reap()
        header = torch.tensor(encode_header(kind, subnet, tensor, requires_grad, loss), dtype=torch.int64,
                              device=self.wire)
        payload = None if tensor is None else tensor.detach().to(self.wire).contiguous()
        buf, apart = self._packing[(kind, dst)].pack(header, payload)
        self._pending.append((dist.isend(buf, dst=self.base + dst, group=group), buf))
        if apart is not None:
            self._pending.append((dist.isend(apart, dst=self.base + dst, group=group), apart))
        if payload is not None:
            self.bytes_sent += payload.numel() * payload.element_size()

    def _reap(self) -> None:
        """Drop completed sends (re-raising a failed one)."""
        while self._pending and self._pending[0][0].is_completed():
            work = self._pending.popleft()[0]
            work.wait()

    def flush(self) -> None:
        """Wait (with the timeout) until every send completed."""
        limit = datetime.timedelta(seconds=self.timeout)
        while self._pending:
            work = self._pending.popleft()[0]
            try:
                work.wait(limit)
            except Exception as e:
                raise TransportError(f"stage {self.rank}: a send did not complete within {self.timeout:g} s: "
                                     f"{e}") from e

    def join(self, timeout: float) -> None:
        """Wait for the receiver threads (they end after the expected messages)."""
        for t in self._threads:
            t.join(timeout)
            if t.is_alive():
                raise TransportError(f"stage {self.rank}: receiver thread {t.name} still running after "
                                     f"{timeout:g} s")
