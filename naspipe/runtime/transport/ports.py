"""Free TCP ports on this machine, for the single-machine launcher's ``env://`` rendezvous.

Why it exists: the launcher picks a free loopback port (or checks the one a user asked for) before it starts
any stage, so a port in use is one clear line, not a rendezvous that hangs.

The port is drawn below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``). A port the kernel
hands out for ``bind(0)`` comes from that range, the same range every outgoing connection takes its local
port from: between the check and the rendezvous store's own bind, one of gloo's many connections (another
run's, or another test's) could take it, and the run failed with ``EADDRINUSE`` (seen in a fresh-clone
``make test`` on three workers). Below the range only a listener can take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000  # below: well-known and registered services' ports
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def ephemeral_range() -> tuple[int, int] | None:
    """The kernel's range of ports for outgoing connections, or None where it cannot be read."""
    try:
        lo, hi = (int(x) for x in RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return None
    return lo, hi


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on, below the ephemeral range where there is room (else one the kernel picks)."""
    span = ephemeral_range()
    if span is not None and span[0] - LOWEST >= 1000:
        draw = random.SystemRandom()  # (not the global generator: a user's seed would give every run one port)
        for _ in range(100):
            port = draw.randrange(LOWEST, span[0])
            if port_free(port, host):
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
