"""The launcher's port: free, and out of the range outgoing connections take their local ports from."""

from __future__ import annotations

import random
import socket

from naspipe.runtime.transport import ports
from naspipe.runtime.transport.ports import LOWEST, ephemeral_range, free_port, port_free


def test_a_free_port_is_below_the_ephemeral_range_and_free():
    lo, _ = ephemeral_range()
    drawn = set()
    for _ in range(20):
        random.seed(0)  # a user's seed does not make every run draw the same port
        drawn.add(free_port())
    assert all(LOWEST <= p < lo and port_free(p) for p in drawn), drawn
    assert len(drawn) > 10


def test_a_port_being_listened_on_is_not_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        assert not port_free(s.getsockname()[1])


def test_where_the_range_cannot_be_read_the_kernel_picks(monkeypatch, tmp_path):
    lo, hi = ephemeral_range()
    monkeypatch.setattr(ports, "RANGE_FILE", tmp_path / "missing")
    assert ephemeral_range() is None
    port = free_port()
    assert lo <= port <= hi and port_free(port)  # the kernel's bind(0) draws from its own range
