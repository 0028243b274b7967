"""The commands that start one naspipe run on N machines: a torchrun line per node, and a SLURM script.

Why it exists: torchrun's c10d rendezvous across hosts needs four settings that its defaults get wrong on
hosts with several interfaces or one shared host name: which node hosts the rendezvous store (``is_host``),
each node's own address (``--local-addr``, which torchrun also hands the workers as the master address),
the interface gloo binds (``GLOO_SOCKET_IFNAME``), and a join timeout shorter than torchrun's 600 s.
``naspipe plan --nodes N`` prints them filled in (tests/runtime/test_multihost.py runs exactly these lines).
No torch here.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

IFNAME_VAR = "GLOO_SOCKET_IFNAME"
HOST_PLACEHOLDER = "HOST{}"  # printed (and noted) when no address was given
IFACE_PLACEHOLDER = "IFACE"


@dataclass(frozen=True)
class NodePlan:
    nodes: int
    procs_per_node: int
    addrs: tuple[str, ...]  # node i's address (node 0 hosts the rendezvous store)
    ifnames: tuple[str, ...]  # node i's interface
    train_args: tuple[str, ...]  # the naspipe.torchrun arguments, the same on every node
    port: int = 29400
    rdzv_id: str = "naspipe"
    join_timeout: int = 60
    torchrun: str = "torchrun"

    @property
    def endpoint(self) -> str:
        host = self.addrs[0]
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def torchrun_args(self, local_addr: str, is_host: str) -> list[str]:
        return [self.torchrun, "--nnodes", str(self.nodes), "--nproc-per-node", str(self.procs_per_node),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.rdzv_id,
                "--rdzv-conf", f"is_host={is_host},join_timeout={self.join_timeout}", "--local-addr", local_addr,
                "--max-restarts", "0", "-m", "naspipe.torchrun", *self.train_args]

    def node_command(self, i: int) -> str:
        """The shell line to paste on node ``i``."""
        args = self.torchrun_args(self.addrs[i], "1" if i == 0 else "0")
        return f"{IFNAME_VAR}={shlex.quote(self.ifnames[i])} {shlex.join(args)}"


def make_plan(nodes: int, procs_per_node: int, train_args: Sequence[str], addrs: Sequence[str] = (),
              ifnames: Sequence[str] = (), **kw: object) -> NodePlan:
    """Placeholders (HOST0.., IFACE) where no address or interface was given; one interface serves all."""
    if addrs and len(addrs) != nodes:
        raise ValueError(f"--node-addrs lists {len(addrs)} addresses for {nodes} nodes")
    if ifnames and len(ifnames) not in (1, nodes):
        raise ValueError(f"--ifname lists {len(ifnames)} interfaces for {nodes} nodes (give one, or one per node)")
    a = tuple(addrs) or tuple(HOST_PLACEHOLDER.format(i) for i in range(nodes))
    f = tuple(ifnames) * (nodes if len(ifnames) == 1 else 1) if ifnames else (IFACE_PLACEHOLDER,) * nodes
    return NodePlan(nodes, procs_per_node, a, f, tuple(train_args), **kw)  # type: ignore[arg-type]


def slurm_script(plan: NodePlan, gpus: bool = False) -> str:
    """An sbatch script: one srun task per node runs torchrun; node 0's address on the interface is looked
    up on node 0 itself (the host name may resolve to another interface)."""
    iface = plan.ifnames[0]
    train = shlex.join(plan.train_args).replace("'", "'\\''")  # inside the single-quoted bash -c
    gpu_line = f"#SBATCH --gpus-per-node={plan.procs_per_node}\n" if gpus else ""
    return f"""#!/bin/bash
#SBATCH --job-name=naspipe
#SBATCH --nodes={plan.nodes}
#SBATCH --ntasks-per-node=1
{gpu_line}set -euo pipefail
export {IFNAME_VAR}={shlex.quote(iface)}
addr_of() {{ ip -o addr show dev "${IFNAME_VAR}" | awk '$3 == "inet" {{split($4, a, "/"); print a[1]; exit}}'; }}
export -f addr_of
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export HEAD_ADDR=$(srun --nodes=1 --ntasks=1 -w "$HEAD" bash -c addr_of)
srun --kill-on-bad-exit=1 bash -c '
  IS_HOST=0; [ "$SLURM_NODEID" = 0 ] && IS_HOST=1
  exec {plan.torchrun} --nnodes {plan.nodes} --nproc-per-node {plan.procs_per_node} \\
    --rdzv-backend c10d --rdzv-endpoint "$HEAD_ADDR:{plan.port}" --rdzv-id "naspipe-$SLURM_JOB_ID" \\
    --rdzv-conf "is_host=$IS_HOST,join_timeout={plan.join_timeout}" --local-addr "$(addr_of)" --max-restarts 0 \\
    -m naspipe.torchrun {train}'
"""
