"""Two hosts on one machine for the multi-host tests: Linux network namespaces joined by a veth pair.

Why it exists: torchrun across machines meets problems one network stack never shows (an interface gloo
must be told, a master address other hosts cannot reach). Each namespace is a host with its own stack (only
``lo`` and ``np0``, addresses 10.213.25.1 and .2/24, which exist nowhere else); the file system is shared.
``two_hosts`` deletes everything it made, and kills every process still inside, also when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
SUBNET = "10.213.25"
IFACE = "np0"


class NamespaceError(RuntimeError):
    pass


def _ip(*args: str) -> None:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise NamespaceError(f"ip {' '.join(args)}: {(p.stderr or p.stdout).strip() or f'exit {p.returncode}'}")


def pids(ns: str) -> list[int]:
    p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(x) for x in p.stdout.split()]


@dataclass
class Host:
    ns: str
    address: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def shell(self, line: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Run ``line`` in this host's shell (bash), as a user pasting it would; output to ``log``."""
        base = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                "PYTHONPATH": str(ROOT)}
        with open(log, "w") as f:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns, "bash", "-c", line], cwd=ROOT,
                                 env={**base, **(env or {})}, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        """Every process inside the namespace goes away at once (the host is lost): all are stopped first, then
        killed, so none of them runs between its neighbours' deaths (killed one by one, a process whose
        neighbour on the same host died first could record an error of its own, which says "it failed", not
        "its host was lost")."""
        stopped: set[int] = set()
        for _ in range(10):  # (a process forked meanwhile is stopped on the next round)
            new = [pid for pid in pids(self.ns) if pid not in stopped]
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            stopped.update(new)
        for pid in stopped | set(pids(self.ns)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def wait_empty(self, seconds: float) -> bool:
        return wait_until(lambda: not pids(self.ns), seconds, every_s=0.2)


@contextlib.contextmanager
def two_hosts(tag: str) -> Iterator[list[Host]]:
    """Namespaces ``<tag>a`` and ``<tag>b``, interface ``np0`` in each, addresses .1 and .2."""
    hosts = [Host(f"{tag}a", f"{SUBNET}.1"), Host(f"{tag}b", f"{SUBNET}.2")]
    made: list[str] = []
    try:
        for h in hosts:
            _ip("netns", "add", h.ns)
            made.append(h.ns)
        _ip("link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b")
        for h, end in zip(hosts, (f"{tag}a", f"{tag}b"), strict=True):
            _ip("link", "set", end, "netns", h.ns)
            _ip("-n", h.ns, "link", "set", end, "name", IFACE)
            _ip("-n", h.ns, "addr", "add", f"{h.address}/24", "dev", IFACE)
            _ip("-n", h.ns, "link", "set", "lo", "up")
            _ip("-n", h.ns, "link", "set", IFACE, "up")
        yield hosts
    finally:
        for h in hosts:
            for p in h.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            if h.ns in made:
                h.kill_all()
                h.wait_empty(10)
        for h in hosts:
            if h.ns in made:  # deleting a namespace deletes its end of the veth pair, and so the pair
                subprocess.run(["ip", "netns", "delete", h.ns], capture_output=True, timeout=30)
        for h in hosts:
            for p in h.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)


def leftovers(tag: str) -> list[str]:
    """Namespaces or interfaces named after ``tag`` that still exist."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=30).stdout
    return [line for line in (ns + links).splitlines() if tag in line]
