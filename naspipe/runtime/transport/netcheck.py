"""The network checks a torchrun rank makes before it meets the others: one named line instead of a hang.

Why it exists: across machines the usual mistakes are a network interface that does not exist or cannot
reach the others (``GLOO_SOCKET_IFNAME``), a master address that other hosts cannot reach (torchrun hands
workers ``localhost`` unless node 0's agent got ``--local-addr``), and a master that is down or behind the
wrong route. torch.distributed meets each of them with a store timeout minutes later that names a store key.
These checks run in a second or two, before any process group exists, and raise ``NetworkError`` whose
text names the setting to fix and the address tried. No torch here (sockets and psutil only).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

IFNAME_VAR = "GLOO_SOCKET_IFNAME"


class NetworkError(RuntimeError):
    """A network setting that cannot work; the text is one line naming it."""


@dataclass(frozen=True)
class Endpoint:
    """What this rank will use: its own address (gloo's), how it was chosen, and the master it meets at."""

    address: str
    chosen_by: str  # "GLOO_SOCKET_IFNAME=np0" or "the host name 'vm'"
    master: str
    port: int
    multi_host: bool


def interfaces() -> dict[str, list[str]]:
    """Every interface that is up, with its IPv4 and IPv6 addresses (IPv4 first)."""
    stats = psutil.net_if_stats()
    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        v4 = [a.address for a in addrs if a.family == socket.AF_INET]
        v6 = [a.address.split("%")[0] for a in addrs if a.family == socket.AF_INET6]
        if v4 or v6:
            out[name] = v4 + v6
    return out


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def _resolve(host: str) -> str:
    return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]


def route_to(master: str, port: int) -> str | None:
    """The local address the kernel would use to reach ``master`` (no packet is sent), or None."""
    try:
        family = socket.AF_INET6 if ":" in _resolve(master) else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((master, port))
            return str(s.getsockname()[0])
    except OSError:
        return None


def suggestion(master: str, port: int, ifaces: Mapping[str, list[str]]) -> str:
    """``the interface that reaches MASTER (np0, 10.0.0.2)`` or, without a route, the list of interfaces."""
    src = route_to(master, port)
    for name, addrs in ifaces.items():
        if src is not None and src in addrs and not _is_loopback(src):
            return f"{IFNAME_VAR}={name} (the interface whose address {src} reaches {master})"
    listed = ", ".join(f"{n} {a[0]}" for n, a in ifaces.items())
    return f"{IFNAME_VAR} to the interface that reaches {master} (this host has: {listed or 'none'})"


def _world(env: Mapping[str, str]) -> tuple[int, int]:
    world = int(env.get("WORLD_SIZE", "1"))
    return world, int(env.get("LOCAL_WORLD_SIZE", str(world)))


def own_endpoint(env: Mapping[str, str]) -> Endpoint:
    """The address gloo will bind (``GLOO_SOCKET_IFNAME``'s first interface, else the host name's address),
    checked for what a multi-host run needs; raises NetworkError."""
    master, port_text = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not master or not port_text or not port_text.isdigit():
        raise NetworkError("MASTER_ADDR and MASTER_PORT are not set: run under torchrun (or set both to the "
                           "address and port of rank 0's store)")
    port = int(port_text)
    world, local = _world(env)
    multi = local < world
    ifaces = interfaces()
    names = env.get(IFNAME_VAR, "")
    if names:
        for name in names.split(","):
            if name not in ifaces:
                listed = ", ".join(f"{n} {a[0]}" for n, a in ifaces.items())
                raise NetworkError(f"{IFNAME_VAR}={names}: this host ({socket.gethostname()}) has no interface "
                                   f"{name!r} that is up with an address (it has: {listed or 'none'}); set "
                                   f"{suggestion(master, port, ifaces)}")
        first = names.split(",")[0]
        address, chosen = ifaces[first][0], f"{IFNAME_VAR}={names}"
    else:
        host = socket.gethostname()
        try:
            address = _resolve(host)
        except OSError as e:
            raise NetworkError(f"{IFNAME_VAR} is not set and this host's name {host!r} does not resolve ({e}); "
                               f"set {suggestion(master, port, ifaces)}") from None
        chosen = f"the host name {host!r} ({IFNAME_VAR} is not set)"
    if multi:
        if _is_loopback(master):
            raise NetworkError(f"MASTER_ADDR is {master}, a loopback address the other hosts cannot reach: start "
                               "node 0's torchrun with --local-addr <node 0's address> (c10d rendezvous passes it on "
                               "as MASTER_ADDR), or give --master-addr")
        if _is_loopback(address):
            raise NetworkError(f"gloo would use {address}, chosen by {chosen}: a loopback address the other hosts "
                               f"cannot reach; set {suggestion(master, port, ifaces)}")
        if not any(address in a for a in ifaces.values()):
            raise NetworkError(f"gloo would use {address}, chosen by {chosen}, which is no address of this host; "
                               f"set {suggestion(master, port, ifaces)}")
    return Endpoint(address, chosen, master, port, multi)


def check_master(ep: Endpoint, timeout: float) -> None:
    """Open a TCP connection to the master's store from this rank's own address (a refusal still proves
    the route); raises NetworkError naming the address tried when it cannot be reached within ``timeout``."""
    try:
        target = _resolve(ep.master)
    except OSError as e:
        raise NetworkError(f"MASTER_ADDR {ep.master} does not resolve ({e}): give node 0's torchrun --local-addr "
                           "<its address>") from None
    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            if ep.multi_host:
                s.bind((ep.address, 0))
            s.connect((target, ep.port))
    except ConnectionRefusedError:
        return  # the host answered: the route works (the store may not listen yet)
    except OSError as e:
        reason = "no answer" if isinstance(e, TimeoutError) else (errno.errorcode.get(e.errno or 0) or str(e))
        src = f" from {ep.address} (chosen by {ep.chosen_by})" if ep.multi_host else ""
        raise NetworkError(f"cannot reach the master {ep.master}:{ep.port}{src} within {timeout:g} s ({reason}): "
                           "check MASTER_ADDR (node 0's torchrun --local-addr or --rdzv-endpoint) and "
                           f"{IFNAME_VAR}") from None
