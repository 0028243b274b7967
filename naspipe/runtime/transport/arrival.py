"""The torchrun ranks' meeting before the process group: each arrives at the master's store with its host.

Why it exists: ``init_process_group`` waits for missing ranks until its timeout and then names a store key,
not a rank, a host or a setting. Here every rank first runs the network checks (``naspipe.runtime.transport.netcheck``)
and posts the result to the master's store: one rank's failed check ends every rank within a second, with
that rank's line; a rank that never arrives ends the others after ``--connect-timeout`` seconds with a line
naming the missing ranks and the settings to check. The roster (rank -> host) names the lost host when a
neighbour on another machine goes away mid-run (``status.json``).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch.distributed import DistError, TCPStore

from naspipe.runtime.transport.netcheck import IFNAME_VAR, Endpoint, NetworkError, check_master, own_endpoint

SETTINGS = f"check each node's {IFNAME_VAR} and node 0's --local-addr"


@dataclass
class Roster:
    """Who arrived where: rank -> {"host": host name, "address": gloo's address, "node": torchrun's node}."""

    hosts: dict[int, dict[str, Any]]
    store: Any = field(default=None, repr=False)  # kept alive: on rank 0 without torchrun's store it serves

    def host(self, rank: int) -> str:
        h = self.hosts.get(rank, {})
        return str(h.get("address") or h.get("host") or "?")

    def ranks_on(self, host: str) -> list[int]:
        return sorted(r for r in self.hosts if self.host(r) == host)


def _store(ep: Endpoint, rank: int, world: int, timeout: float, env: Mapping[str, str]) -> Any:
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"  # torchrun's agent serves it
    return TCPStore(ep.master, ep.port, world, is_master=rank == 0 and not agent,
                    timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False, multi_tenant=True)


def _prefix(env: Mapping[str, str]) -> str:
    return f"naspipe/arrival/{env.get('TORCHELASTIC_RUN_ID', 'none')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/"


def tell_others(rank: int, world: int, line: str, env: Mapping[str, str] | None = None,
                patience: float = 15.0) -> None:
    """Post this rank's failure (a failed check, bad options) where the others wait, so they end now with
    ``line`` instead of after ``--connect-timeout``; best effort, when a store listens at the master within
    ``patience`` seconds."""
    env = os.environ if env is None else env
    prefix = _prefix(env)
    try:
        master, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
        if not (rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true"):
            deadline = time.monotonic() + patience  # (rank 0 may still be starting its store)
            while True:
                try:
                    socket.create_connection((master, port), timeout=5.0).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.5)
        _store(Endpoint("", "", master, port, multi_host=False), rank, world, 5.0, env).set(prefix + "failure", line)
    except Exception:  # noqa: BLE001 - the rank's own line is what matters; the others time out
        pass


def meet(rank: int, world: int, timeout: float, env: Mapping[str, str] | None = None,
         poll: float = 0.2, say: Callable[[NetworkError], None] | None = None) -> Roster:
    """Check this rank's network, post the result, wait (at most ``timeout`` s) for every rank; NetworkError.

    ``say``: called with this rank's own network error before the others are told of it (telling them can wait
    for the master's store, and a launcher may stop this rank once a sibling ends: the rank's line comes first).
    """
    env = os.environ if env is None else env
    prefix = _prefix(env)
    try:
        ep = own_endpoint(env)
    except NetworkError as e:
        if say is not None:
            say(e)
        tell_others(rank, world, f"rank {rank} on {socket.gethostname()}: {e}", env)
        raise
    check_master(ep, min(timeout, 20.0))  # unreachable: there is nobody to tell
    me = {"host": socket.gethostname(), "address": ep.address, "node": env.get("GROUP_RANK", "?")}
    try:
        store = _store(ep, rank, world, timeout, env)
    except (DistError, RuntimeError) as e:
        raise NetworkError(f"cannot open the master's store at {ep.master}:{ep.port} from {ep.address} within "
                           f"{timeout:g} s (--connect-timeout): {str(e).splitlines()[0]}; {SETTINGS}") from None
    store.set(prefix + f"rank/{rank}", json.dumps(me))
    serving = rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true"
    deadline = time.monotonic() + timeout
    try:
        while True:
            if store.check([prefix + "failure"]):
                line = store.get(prefix + "failure").decode()
                if serving:
                    time.sleep(2 * poll + 1.0)
                raise NetworkError(line)
            missing = [r for r in range(world) if not store.check([prefix + f"rank/{r}"])]
            if not missing:
                break
            if time.monotonic() > deadline:  # (the first rank past its deadline tells the others)
                line = (f"rank(s) {', '.join(map(str, missing))} of {world} did not arrive at the master "
                        f"{ep.master}:{ep.port} within {timeout:g} s (--connect-timeout): start every node's torchrun "
                        f"(same --nnodes, --nproc-per-node and --rdzv-id), and {SETTINGS}")
                store.set(prefix + "failure", line)
                if serving:
                    time.sleep(2 * poll + 1.0)  # the others read the line before the store goes
                raise NetworkError(line)
            time.sleep(poll)
        hosts = {r: json.loads(store.get(prefix + f"rank/{r}")) for r in range(world)}
    except DistError as e:
        raise NetworkError(f"the master's store at {ep.master}:{ep.port} went away while the ranks met "
                           f"({str(e).splitlines()[0]}): rank 0's node ended; see its error") from None
    return Roster(hosts, store)
