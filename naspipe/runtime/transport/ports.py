"""Free TCP ports on this machine, for the single-machine launcher's ``env://`` rendezvous.

Why it exists: the launcher picks a free loopback port (or checks the one a user asked for) before it starts
any stage, so a port in use is one clear line, not a rendezvous that hangs.
"""

from __future__ import annotations

import socket


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
