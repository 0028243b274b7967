"""The commands that start one naspipe run on N machines: a torchrun line per node, and a SLURM script.

Why it exists: torchrun's c10d rendezvous across hosts needs four settings that its defaults get wrong on
hosts with several interfaces or one shared host name: which node hosts the rendezvous store (``is_host``),
each node's own address (``--local-addr``, which torchrun also hands the workers as the master address),
the interface gloo binds (``GLOO_SOCKET_IFNAME``), and a join timeout shorter than torchrun's 600 s.
``naspipe plan --nodes N`` prints them filled in (tests/runtime/test_multihost.py runs exactly these lines), and
with ``--slurm`` the sbatch script alone (tests/cli/test_plan_nodes.py runs it against stub ``srun``, ``scontrol``,
``ip`` and ``torchrun``). No torch here.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from naspipe.cli.common import counted
from naspipe.errors import UserError

IFNAME_VAR = "GLOO_SOCKET_IFNAME"
HOST_PLACEHOLDER = "HOST{}"  # printed (and noted) when no address was given
IFACE_PLACEHOLDER = "IFACE"
IFNAME_MAX = 15  # Linux: IFNAMSIZ - 1
RDZV_ID = "naspipe"  # the rendezvous id when none is given (under SLURM: naspipe-$SLURM_JOB_ID)


@dataclass(frozen=True)
class NodePlan:
    nodes: int
    procs_per_node: int
    addrs: tuple[str, ...]  # node i's address (node 0 hosts the rendezvous store)
    ifnames: tuple[str, ...]  # node i's interface
    train_args: tuple[str, ...]  # the naspipe.torchrun arguments, the same on every node
    port: int = 29400
    rdzv_id: str | None = None  # None: "naspipe" (under SLURM, naspipe-<the job's id>)
    join_timeout: int = 60
    torchrun: str = "torchrun"

    @property
    def endpoint(self) -> str:
        host = self.addrs[0]
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def torchrun_args(self, local_addr: str, is_host: str) -> list[str]:
        return [self.torchrun, "--nnodes", str(self.nodes), "--nproc-per-node", str(self.procs_per_node),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.rdzv_id or RDZV_ID,
                "--rdzv-conf", f"is_host={is_host},join_timeout={self.join_timeout}", "--local-addr", local_addr,
                "--max-restarts", "0", "-m", "naspipe.torchrun", *self.train_args]

    def node_command(self, i: int) -> str:
        """The shell line to paste on node ``i``."""
        args = self.torchrun_args(self.addrs[i], "1" if i == 0 else "0")
        return f"{IFNAME_VAR}={shlex.quote(self.ifnames[i])} {shlex.join(args)}"


def make_plan(nodes: int, procs_per_node: int, train_args: Sequence[str], addrs: Sequence[str] = (),
              ifnames: Sequence[str] = (), **kw: object) -> NodePlan:
    """Placeholders (HOST0.., IFACE) where no address or interface was given; one interface serves all.
    A UserError (one line) for a count that does not match ``nodes``, an empty address or a bad interface name."""
    if addrs == [""]:
        raise UserError("--node-addrs is empty: give one address per node, separated by commas")
    if addrs and len(addrs) != nodes:
        raise UserError(f"--node-addrs lists {counted(len(addrs), 'address', 'addresses')} for "
                        f"{counted(nodes, 'node')}")
    if ifnames and len(ifnames) not in (1, nodes):
        raise UserError(f"--ifname lists {counted(len(ifnames), 'interface')} for {counted(nodes, 'node')} (give one, "
                        "or one per node)")
    for i, a in enumerate(addrs):
        if not a.strip() or a != a.strip():
            raise UserError(f"--node-addrs: node {i}'s address {a!r} is empty or has spaces; give one address per "
                             "node, separated by commas")
    addrs = [_address(i, a) for i, a in enumerate(addrs)]
    rdzv_id = kw.get("rdzv_id")
    if rdzv_id is not None and (not isinstance(rdzv_id, str) or not rdzv_id
                                or any(c.isspace() or not c.isprintable() for c in rdzv_id)):
        raise UserError(f"--rdzv-id must be one word of printable characters, got {rdzv_id!r}")
    for i, f in enumerate(ifnames):
        if (why := ifname_error(f)) is not None:
            whose = "the" if len(ifnames) == 1 else f"node {i}'s"
            raise UserError(f"--ifname: {whose} interface {why}")
    a = tuple(addrs) or tuple(HOST_PLACEHOLDER.format(i) for i in range(nodes))
    f = tuple(ifnames) * (nodes if len(ifnames) == 1 else 1) if ifnames else (IFACE_PLACEHOLDER,) * nodes
    return NodePlan(nodes, procs_per_node, a, f, tuple(train_args), **kw)  # type: ignore[arg-type]


def _address(i: int, addr: str) -> str:
    """Node ``i``'s address, checked: an IP literal (IPv4; IPv6 bare or in brackets as in a URL, ``[::1]``, with or
    without a zone, ``fe80::1%eth0``) or a host name (RFC 1123: letters, digits, '-' and '.'). Returned without
    the brackets (the endpoint adds them back, once). A UserError (one line) for anything else: whitespace or a
    control character (printed raw in the plan's ``# node`` line, a newline there began a line of its own), a
    host:port (the port is --rdzv-port's), a bracket without its pair."""
    def refuse(why: str) -> UserError:
        return UserError(f"--node-addrs: node {i}'s address {addr!r} {why}")

    if any(c.isspace() or not c.isprintable() for c in addr):
        raise refuse("holds whitespace or a control character; give one address per node, separated by commas")
    if (m := re.fullmatch(r"\[([^][]+)\]:\d+", addr)) is not None:
        raise refuse(f"is a host and a port: give the host alone ({m[1]!r}) and the port with --rdzv-port")
    bracketed = addr.startswith("[") and addr.endswith("]")
    inner = addr[1:-1] if bracketed else addr
    if not inner or "[" in inner or "]" in inner:
        raise refuse("is not an address (an IPv6 address goes bare, ::1, or in brackets, [::1])")
    try:
        ip = ipaddress.ip_address(inner)
    except ValueError:
        ip = None
    if ip is not None:
        zone = getattr(ip, "scope_id", None)
        if zone is not None and not _ZONE.fullmatch(zone):
            raise refuse(f"has the zone {zone!r}, which is no interface name or number")
        if bracketed and ip.version == 4:
            raise refuse("is an IPv4 address in brackets (only an IPv6 address goes in brackets)")
        return inner
    host, colon, port = inner.rpartition(":")
    if colon and port.isdigit() and host and ":" not in host and not bracketed:
        raise refuse(f"is a host and a port: give the host alone ({host!r}) and the port with --rdzv-port")
    if bracketed or ":" in inner:
        raise refuse("is not an IPv6 address")
    if not _host_name(inner):
        raise refuse("is neither an IP address nor a host name (letters, digits, '-' and '.')")
    return inner


_ZONE = re.compile(rf"[A-Za-z0-9_.-]{{1,{IFNAME_MAX}}}")  # an interface's name or index
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")


def _host_name(name: str) -> bool:
    """``name`` is a host name as RFC 1123 writes one (a last label of digits alone is a malformed IPv4 address)."""
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    return len(name) <= 253 and all(_LABEL.match(x) for x in labels) and not labels[-1].isdigit()


def ifname_error(name: str) -> str | None:
    """Why ``name`` cannot be a Linux interface name (empty, over 15 characters, a slash, colon or space), or None."""
    if not name:
        return "name is empty"
    if len(name) > IFNAME_MAX:
        return f"name {name!r} is longer than {IFNAME_MAX} characters"
    if name in (".", "..") or any(c in "/:" or c.isspace() for c in name):
        return f"name {name!r} is not an interface name (no '/', ':' or spaces)"
    return None


def slurm_script(plan: NodePlan, gpus: bool = False) -> str:
    """An sbatch script (``sbatch`` takes it as printed): one srun task per node runs torchrun with that node's
    interface (``SLURM_NODEID`` picks it) and that node's address on it, looked up on the node itself (the host
    name may resolve to another interface); node 0's address is the rendezvous endpoint. A failing ``ip`` or an
    interface without an IPv4 address ends the job with one line naming the node, before torchrun starts."""
    train = shlex.join(plan.train_args).replace("'", "'\\''")  # inside the single-quoted bash -c
    # the rendezvous id given (--rdzv-id), else one of this job's own (two jobs never share a rendezvous)
    rdzv = shlex.quote(plan.rdzv_id).replace("'", "'\\''") if plan.rdzv_id is not None else \
        f'"{RDZV_ID}-$SLURM_JOB_ID"'
    gpu_line = f"#SBATCH --gpus-per-node={plan.procs_per_node}\n" if gpus else ""
    cases = " ".join(f"{i}) echo {shlex.quote(f)} ;;" for i, f in enumerate(plan.ifnames))
    return f"""#!/bin/bash
#SBATCH --job-name=naspipe
#SBATCH --nodes={plan.nodes}
#SBATCH --ntasks-per-node=1
{gpu_line}set -euo pipefail
# node i's interface ({IFNAME_VAR}), by its SLURM_NODEID
iface_of() {{ case "$1" in {cases} *) echo "naspipe: no interface for node $1" >&2; return 1 ;; esac; }}
# the IPv4 address of interface $1 on this node; a failing ip or no address is one line and a failure
addr_of() {{
  local out addr
  out=$(ip -o -4 addr show dev "$1") || {{ echo "naspipe: ip cannot read interface $1 on $(hostname)" >&2; return 1; }}
  addr=$(printf '%s\\n' "$out" | awk '$3 == "inet" {{split($4, a, "/"); print a[1]; exit}}')
  [ -n "$addr" ] || {{ echo "naspipe: interface $1 on $(hostname) has no IPv4 address" >&2; return 1; }}
  echo "$addr"
}}
export -f iface_of addr_of
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
HEAD=${{HEAD%%$'\\n'*}}
HEAD_ADDR=$(srun --nodes=1 --ntasks=1 -w "$HEAD" bash -c 'addr_of "$(iface_of 0)"')
export HEAD_ADDR
srun --kill-on-bad-exit=1 bash -c '
  set -euo pipefail
  {IFNAME_VAR}=$(iface_of "$SLURM_NODEID")
  export {IFNAME_VAR}
  LOCAL_ADDR=$(addr_of "${IFNAME_VAR}")
  IS_HOST=0; [ "$SLURM_NODEID" = 0 ] && IS_HOST=1
  exec {plan.torchrun} --nnodes {plan.nodes} --nproc-per-node {plan.procs_per_node} \\
    --rdzv-backend c10d --rdzv-endpoint "$HEAD_ADDR:{plan.port}" --rdzv-id {rdzv} \\
    --rdzv-conf "is_host=$IS_HOST,join_timeout={plan.join_timeout}" --local-addr "$LOCAL_ADDR" --max-restarts 0 \\
    -m naspipe.torchrun {train}'
"""
