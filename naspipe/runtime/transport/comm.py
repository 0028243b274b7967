"""Point-to-point transport between neighbouring stages: messages of fixed-length int64 headers and payloads.

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
stage loop; their handles (and tensors) are kept until complete and awaited with a timeout in ``flush``. A
failed send raises ``SendFailure``; both name the neighbour's global rank (``peer``), whichever side meets a
lost neighbour first (a host lost mid-run: ``naspipe.torchrun``).

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

Structured messages (a block's output that is a tuple, list or dict of tensors, ``naspipe.supernet.messages``): a tree
header (``FLAG_TREE``: the number of distinct tensors and the layout's length) is followed by one ordinary header
per tensor, the layout when it changed on the channel (``FLAG_LAYOUT``: the pytree structure and which tensor
fills each place, as JSON bytes; the receiver keeps the last one), then the tensors' payloads. The same packing
applies to the whole: once two messages in a row had the same size, one transfer per message; otherwise the tree
header alone, then the rest of the head and each payload in transfers of their own. A structured gradient is a
list with one tensor (or none) per distinct tensor of the activation, without a layout. A single tensor travels
exactly as before.
"""

from __future__ import annotations

import datetime
import queue
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from naspipe.runtime.stagerun import StageRun
from naspipe.supernet import messages
from naspipe.supernet.messages import WIRE_DTYPES

HEADER_LEN = 13  # kind, subnet, flags, dtype, ndim, up to 7 dims, the subnet's loss (float64 bits)
MAX_DIMS = messages.MAX_DIMS
ACTIVATION = 1
GRADIENT = 2
KIND_NAMES = {ACTIVATION: "activation", GRADIENT: "gradient"}
FLAG_REQUIRES_GRAD = 1  # the sender's tensor requires grad: the receiver mirrors it
FLAG_EMPTY = 2  # no payload follows (a gradient that does not exist)
FLAG_LOSS = 4  # the last field holds the subnet's training loss, the bits of a float64 (run-time streams)
FLAG_APART = 8  # the payload follows in a transfer of its own (the message does not have the channel's steady size)
FLAG_TREE = 16  # a structured message: this header announces leaf headers, a layout and leaf payloads
FLAG_LAYOUT = 32  # (structured) the message's layout follows its leaf headers (it changed on this channel)
DTYPES = WIRE_DTYPES  # (naspipe.supernet.messages: codes are positions, append only)


class TransportError(RuntimeError):
    pass


class SendFailure(TransportError):
    """A send to a neighbour failed (gloo raises at ``isend`` once the neighbour's connection closed): like a
    receive's ``ChannelFailure``, it names the neighbour's global rank, so a stage that meets a lost neighbour
    first on the send side reports the same loss."""

    def __init__(self, text: str, peer: int):
        super().__init__(text)
        self.peer = peer


@dataclass
class Message:
    kind: int  # ACTIVATION or GRADIENT
    subnet: int
    # one tensor; a structured activation (a tuple, list or dict of tensors, rebuilt as sent); a structured
    # gradient: a list with one tensor (or None) per distinct leaf of the activation it belongs to
    tensor: Any
    requires_grad: bool | tuple[bool, ...] = False  # structured: one flag per distinct leaf
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
MAX_LEAVES = 1 << 12  # distinct tensors in one structured message
MAX_LAYOUT = 1 << 20  # bytes of a structured message's layout (its pytree spec)
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
        buf, apart = self.pack_parts(header, [] if payload is None else [payload])
        return buf, (apart[0] if apart else None)

    def pack_parts(self, head: Tensor, payloads: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """``pack`` for a message of any number of payloads (a structured message: ``head`` holds its tree header,
        leaf headers and layout). The buffer to send now and what follows apart where the message does not fit
        it: the rest of ``head`` (as int64), then each payload in a transfer of its own."""
        hbytes = head.numel() * 8
        total = hbytes + sum(p.numel() * p.element_size() for p in payloads)
        if total == self.size:
            buf = torch.empty(total, dtype=torch.uint8, device=head.device)
            buf[:hbytes] = head.view(torch.uint8)
            at = hbytes
            for p in payloads:
                n = p.numel() * p.element_size()
                buf[at:at + n] = p.reshape(-1).view(torch.uint8)
                at += n
            apart: list[Tensor] = []
        else:  # the header alone (padded to the size the receiver waits for), the rest in transfers of its own
            buf = torch.zeros(self.size, dtype=torch.uint8, device=head.device)
            first = head[:HEADER_LEN].clone()
            first[2] |= FLAG_APART
            buf[:HEADER_BYTES] = first.view(torch.uint8)
            apart = ([head[HEADER_LEN:].contiguous()] if head.numel() > HEADER_LEN else []) + list(payloads)
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

    def unpack_tree(self, buf: Tensor, recv: Any) -> tuple[list[int], list[Tensor | None], list[bool], bytes | None]:
        """A structured message from its first transfer ``buf`` (``recv(tensor)`` receives the transfers that
        follow apart): ``(tree header values, one payload or None per leaf, requires-grad flags, layout or
        None)``."""
        values = buf[:HEADER_BYTES].view(torch.int64).tolist()
        flags, count, lay_len = values[2], values[3], values[4]
        if not 0 < count <= MAX_LEAVES or not 0 <= lay_len <= MAX_LAYOUT or values[0] not in KIND_NAMES:
            raise TransportError(f"malformed structured header {values}")
        hlen = HEADER_LEN * (1 + count) + (lay_len + 7) // 8
        apart = bool(flags & FLAG_APART)
        if apart:
            head = torch.empty(hlen, dtype=torch.int64, device=buf.device)
            head[:HEADER_LEN] = buf[:HEADER_BYTES].view(torch.int64)
            if hlen > HEADER_LEN:
                recv(head[HEADER_LEN:])
        else:
            if buf.numel() < hlen * 8:
                raise TransportError(f"a message of {buf.numel()} bytes is shorter than its {hlen * 8}-byte header")
            head = buf[:hlen * 8].view(torch.int64)
        parts: list[Tensor | None] = []
        grads: list[bool] = []
        for i in range(count):
            lv = head[HEADER_LEN * (1 + i):HEADER_LEN * (2 + i)].tolist()
            _, _, lflags, dtype, shape = decode_header(lv)
            parts.append(None if dtype is None else torch.empty(shape, dtype=dtype, device=buf.device))
            grads.append(bool(lflags & FLAG_REQUIRES_GRAD))
        lay = None
        if flags & FLAG_LAYOUT:
            at = HEADER_LEN * (1 + count)
            lay = head[at:].contiguous().view(torch.uint8)[:lay_len].cpu().numpy().tobytes()
        nbytes = sum(p.numel() * p.element_size() for p in parts if p is not None)
        if apart:
            for p in parts:
                if p is not None:
                    recv(p)
        else:
            if hlen * 8 + nbytes != buf.numel():
                raise TransportError(f"a message of {buf.numel()} bytes announces {hlen * 8 + nbytes} bytes")
            at = hlen * 8
            for p in parts:
                if p is not None:
                    n = p.numel() * p.element_size()
                    p.view(-1).view(torch.uint8).copy_(buf[at:at + n])
                    at += n
        self._advance(hlen * 8 + nbytes)
        return values, parts, grads, lay


def encode_tree(kind: int, subnet: int, parts: list[Tensor | None], grads: list[bool], lay: bytes | None,
                loss: float | None, device: torch.device) -> Tensor:
    """The head of a structured message as int64: tree header, one header per leaf, the layout (if sent)."""
    if not 0 < len(parts) <= MAX_LEAVES:
        raise TransportError(f"a structured message has {len(parts)} tensors; 1 to {MAX_LEAVES} are supported")
    lflag, lbits = _loss_bits(loss)
    lay = lay or b""
    if len(lay) > MAX_LAYOUT:
        raise TransportError(f"a message's structure takes {len(lay)} bytes; at most {MAX_LAYOUT}")
    flags = FLAG_TREE | lflag | (FLAG_LAYOUT if lay else 0)
    ints = [kind, subnet, flags, len(parts), len(lay)] + [0] * MAX_DIMS + [lbits]
    for p, g in zip(parts, grads, strict=True):
        ints += encode_header(kind, subnet, p, g)
    head = torch.tensor(ints, dtype=torch.int64)
    if lay:
        padded = torch.zeros((len(lay) + 7) // 8 * 8, dtype=torch.uint8)
        padded[:len(lay)] = torch.frombuffer(bytearray(lay), dtype=torch.uint8)
        head = torch.cat([head, padded.view(torch.int64)])
    return head.to(device)


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
        self._pending: deque[tuple[dist.Work, Tensor, int]] = deque()  # the tensor stays alive until sent
        self._packing = {(ACTIVATION, rank + 1): Packing(), (GRADIENT, rank - 1): Packing()}
        self._threads: list[threading.Thread] = []
        self.received = {ACTIVATION: 0, GRADIENT: 0}
        self.bytes_sent = 0
        self._layouts: dict[int, bytes] = {}  # per destination: the layout of the last structured activation sent
        # per kind sent: messages, payload bytes, the largest message's payload bytes, the most tensors in one,
        # whether any was structured (``naspipe.runtime.outputs.boundaries`` reports them per stage boundary)
        self.traffic = {name: {"messages": 0, "bytes": 0, "largest": 0, "tensors": 0, "structured": False}
                        for name in (KIND_NAMES[ACTIVATION], KIND_NAMES[GRADIENT])}

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
            lay: bytes | None = None  # the layout of this channel's structured messages, as last sent

            def recv(t: Tensor) -> None:
                dist.recv(t, src=self.base + src, group=group)

            for _ in range(self.expected):
                buf = torch.empty(packing.size, dtype=torch.uint8, device=self.wire)
                recv(buf)
                if int(buf[:HEADER_BYTES].view(torch.int64)[2]) & FLAG_TREE:
                    values, parts, flags, new_lay = packing.unpack_tree(buf, recv)
                    k, j = values[0], values[1]
                    if k != kind:
                        raise TransportError(f"expected a {KIND_NAMES[kind]}, got a {KIND_NAMES[k]} header")
                    parts = [None if p is None else p.to(self.device) for p in parts]
                    if kind == ACTIVATION:
                        lay = new_lay if new_lay is not None else lay
                        if lay is None:
                            raise TransportError("a structured activation before its layout")
                        if any(p is None for p in parts):
                            raise TransportError("a structured activation with an empty leaf")
                        msg = Message(kind, j, messages.rebuild(parts, lay), tuple(flags), decode_loss(values))
                    else:
                        msg = Message(kind, j, parts, False, decode_loss(values))
                    self.received[kind] += 1
                    self.inbox.put(msg)
                    continue
                values, payload, apart = packing.unpack(buf)
                k, j, flags = values[0], values[1], values[2]
                if k != kind:
                    raise TransportError(f"expected a {KIND_NAMES[kind]}, got a {KIND_NAMES[k]} header")
                if apart and payload is not None:
                    recv(payload)
                if payload is not None:
                    payload = payload.to(self.device)  # (a no-op unless staged through host memory)
                self.received[kind] += 1
                self.inbox.put(Message(kind, j, payload, bool(flags & FLAG_REQUIRES_GRAD), decode_loss(values)))
        except Exception as e:  # noqa: BLE001 - reported to the stage loop, which fails the run
            self.inbox.put(ChannelFailure(f"stage {self.rank}: receiving {what} failed after "
                                          f"{self.received[kind]} of {self.expected}: {type(e).__name__}: {e}",
                                          self.base + src))

    # ---- sending ---------------------------------------------------------------------------------------
    def send_activation(self, subnet: int, tensor: Any, requires_grad: bool | tuple[bool, ...]) -> None:
        """Send ``subnet``'s activation downstream: one tensor, or a structured message (a pytree of tensors,
        ``requires_grad`` one flag per distinct leaf, ``naspipe.supernet.messages``)."""
        self._send(ACTIVATION, self.rank + 1, self.act_groups[self.rank], subnet, tensor, requires_grad)

    def send_gradient(self, subnet: int, tensor: Any, loss: float | None = None) -> None:
        """Send ``subnet``'s input gradient upstream (one tensor or None; for a structured input a list with one
        tensor or None per distinct leaf), with its loss when known (bit-exact, in the header)."""
        self._send(GRADIENT, self.rank - 1, self.grad_groups[self.rank - 1], subnet, tensor, False, loss)

    def _send(self, kind: int, dst: int, group: dist.ProcessGroup | None, subnet: int, tensor: Any,
              requires_grad: bool | tuple[bool, ...], loss: float | None = None) -> None:
        self._reap()
        if tensor is not None and not isinstance(tensor, Tensor):
            self._send_tree(kind, dst, group, subnet, tensor, requires_grad, loss)
            return
        header = torch.tensor(encode_header(kind, subnet, tensor, bool(requires_grad), loss), dtype=torch.int64,
                              device=self.wire)
        payload = None if tensor is None else tensor.detach().to(self.wire).contiguous()
        buf, apart = self._packing[(kind, dst)].pack(header, payload)
        self._isend(kind, dst, group, subnet, (buf,) if apart is None else (buf, apart))
        self._count(kind, [] if payload is None else [payload], False)

    def _send_tree(self, kind: int, dst: int, group: dist.ProcessGroup | None, subnet: int, msg: Any,
                   requires_grad: Any, loss: float | None) -> None:
        """A structured message: its distinct leaves (a gradient: the list as given), one transfer where the
        channel's size is steady; the layout only when it changed on this channel."""
        if kind == ACTIVATION:
            parts: list[Tensor | None] = list(messages.leaves(msg))
            many = isinstance(requires_grad, (tuple, list))
            flags = list(requires_grad) if many else [bool(requires_grad)] * len(parts)
            lay = messages.layout(msg)
            send_lay = lay if self._layouts.get(dst) != lay else None
            self._layouts[dst] = lay
        else:
            parts, flags, send_lay = list(msg), [False] * len(msg), None
        parts = [None if p is None else p.detach().to(self.wire).contiguous() for p in parts]
        head = encode_tree(kind, subnet, parts, flags, send_lay, loss, self.wire)
        payloads = [p for p in parts if p is not None]
        buf, apart = self._packing[(kind, dst)].pack_parts(head, payloads)
        self._isend(kind, dst, group, subnet, (buf, *apart))
        self._count(kind, payloads, True)

    def _isend(self, kind: int, dst: int, group: dist.ProcessGroup | None, subnet: int,
               parts: tuple[Tensor, ...]) -> None:
        """Start the sends of one message; a send that cannot start names the neighbour (a lost host)."""
        peer = self.base + dst
        for part in parts:
            try:
                work = dist.isend(part, dst=peer, group=group)
            except Exception as e:  # noqa: BLE001 - gloo: RuntimeError "Connection closed by peer"
                raise SendFailure(f"stage {self.rank}: sending the {KIND_NAMES[kind]} of subnet {subnet} to stage "
                                  f"{dst} failed: {type(e).__name__}: {e}", peer) from e
            self._pending.append((work, part, peer))

    def _count(self, kind: int, payloads: list[Tensor], structured: bool) -> None:
        n = sum(p.numel() * p.element_size() for p in payloads)
        self.bytes_sent += n
        t = self.traffic[KIND_NAMES[kind]]
        t["messages"] += 1
        t["bytes"] += n
        t["largest"] = max(t["largest"], n)
        t["tensors"] = max(t["tensors"], len(payloads))
        t["structured"] = t["structured"] or structured

    def _reap(self) -> None:
        """Drop completed sends (re-raising a failed one)."""
        while self._pending and self._pending[0][0].is_completed():
            work, _, peer = self._pending.popleft()
            try:
                work.wait()
            except Exception as e:  # noqa: BLE001 - the neighbour went away while the send was in flight
                raise SendFailure(f"stage {self.rank}: a send to rank {peer} failed: {type(e).__name__}: {e}",
                                  peer) from e

    def flush(self) -> None:
        """Wait (with the timeout) until every send completed."""
        deadline = time.monotonic() + self.timeout  # (one limit for all of them, not one each)
        while self._pending:
            work, _, peer = self._pending.popleft()
            try:
                work.wait(datetime.timedelta(seconds=max(0.001, deadline - time.monotonic())))
            except Exception as e:
                raise TransportError(f"stage {self.rank}: a send to rank {peer} did not complete within "
                                     f"{self.timeout:g} s: {e}") from e  # (slow or hung is not lost: no peer)

    def join(self, timeout: float) -> None:
        """Wait for the receiver threads (they end after the expected messages)."""
        deadline = time.monotonic() + timeout  # (one limit for all of them, not one each)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise TransportError(f"stage {self.rank}: receiver thread {t.name} still running after "
                                     f"{timeout:g} s")
