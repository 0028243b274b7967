"""``naspipe plan``: rank every stages x replicas split of a device count on the simulator.

Why it exists: past a few stages the causal bound, not the scheduler, caps a CSP pipeline, so more devices
pay only as data-parallel replicas; which split is best depends on the space, the batch and the link
between replicas. The planner simulates each split on the same sequence (``naspipe.sim.replicas.plan``)
and prints the table, best first (no torch, no processes). With ``--sampler fair`` (or ``spread[:BASE]``)
it ranks the splits on that sampler's sequence and says, per split, what the sampler changes against uniform
sampling: throughput, and subnets that reuse a candidate of one of the ``stages - 1`` before them
(``naspipe.sequences.conflicts``).

With ``--nodes N`` it prints instead how to start a run on N machines: the torchrun line for each node
and a SLURM script (``naspipe.cli.nodes``), after checking the training arguments given after ``--`` as every
rank will, except that the device is the other machines' (a ``--device cuda`` plan is made on a CPU-only login
node). ``--slurm`` prints the script alone, which ``sbatch`` takes as it is.
"""

from __future__ import annotations

import argparse
import json
import sys

from naspipe.cli.cmd_simulate import add_link_arguments, batch_alpha_from_args, link_from_args
from naspipe.cli.common import counted, positive_int
from naspipe.errors import UserError
from naspipe.runspec.spec import DEFAULT_SHARED
from naspipe.sched.policies import DEFAULT_POLICY

COMMAND = "plan"
# more machines, or processes per machine, than a run's stages x replicas could use (stages <= the space's blocks,
# replicas divide its batch): refused by the option itself, before a line per node is made
MAX_NODES = 65536
MAX_PROCS_PER_NODE = 1024
HELP = "rank stages x replicas for a device count on the simulator"
ORDER = 11


def add_arguments(p: argparse.ArgumentParser) -> None:
    from naspipe.sequences.samplers import DEFAULT_SAMPLER, sampler_forms

    p.add_argument("--devices", type=positive_int("--devices"), default=None, help="devices N to split")
    p.add_argument("--space", default="naspipe-k96", help="preset name or JSON file (default %(default)s)")
    p.add_argument("--subnets", type=positive_int("--subnets"), default=500,
                   help="subnets simulated per split (default %(default)s)")
    p.add_argument("--policy", default=DEFAULT_POLICY, help="scheduling policy (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the subnet sequence")
    p.add_argument("--sampler", default=None,
                   help=f"sequence to plan on: {sampler_forms(online=False, full=True)}; named and other than "
                        "uniform, each split is also simulated on the uniform sequence and the change reported "
                        f"(default {DEFAULT_SAMPLER}, the runs')")
    p.add_argument("--window", type=positive_int("--window"), default=200, help="scheduler window")
    p.add_argument("--shared-layers", default=DEFAULT_SHARED, help="fixed-block semantics (default %(default)s)")
    p.add_argument("--batch-alpha", type=float, default=None,
                   help="fixed share of a task's time at the space's batch (default 0.1; see sim/costs.py)")
    add_link_arguments(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    g = p.add_argument_group("commands for N machines (instead of --devices; training options after --)")
    g.add_argument("--nodes", type=positive_int("--nodes", maximum=MAX_NODES), default=None, help="machines N")
    g.add_argument("--procs-per-node", type=positive_int("--procs-per-node", maximum=MAX_PROCS_PER_NODE), default=1,
                   metavar="G",
                   help="processes (stages or replicas, e.g. GPUs) per machine (default %(default)s)")
    g.add_argument("--node-addrs", default=None, metavar="A0,A1,...",
                   help="each machine's address on the network the ranks use; machine 0 hosts the rendezvous")
    g.add_argument("--ifname", default=None, metavar="IF|IF0,IF1,...",
                   help="the interface of that network (GLOO_SOCKET_IFNAME), one for all or one per machine")
    g.add_argument("--rdzv-port", type=positive_int("--rdzv-port", maximum=65535), default=29400,
                   help="the rendezvous store's port on machine 0 (default %(default)s)")
    g.add_argument("--rdzv-id", default=None,
                   help="the rendezvous id (default naspipe; under --slurm, naspipe-$SLURM_JOB_ID)")
    g.add_argument("--join-timeout", type=positive_int("--join-timeout"), default=60,
                   help="seconds torchrun waits for every machine to join (default %(default)s)")
    g.add_argument("--slurm", action="store_true",
                   help="only the SLURM script, which sbatch takes as it is (naspipe plan ... --slurm | sbatch)")
    g.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then the naspipe.torchrun options")


# plan's own run options that the training commands take too: given before ``--`` (other than their defaults),
# they go into every node's command, as if given after it
RUN_OPTIONS = ("space", "subnets", "policy", "seed", "sampler", "window", "shared_layers")


def _with_run_options(args: argparse.Namespace, train: list[str]) -> list[str]:
    """``train`` with plan's run options added where they were given and the training options do not name them;
    a UserError when both name one with different values."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    defaults = parser.parse_args([])
    out = list(train)
    for name in RUN_OPTIONS:
        value, flag = vars(args)[name], "--" + name.replace("_", "-")
        if value == vars(defaults)[name]:
            continue
        named = [a for i, a in enumerate(train) if train[i - 1:i] == [flag]] + \
            [a.split("=", 1)[1] for a in train if a.startswith(flag + "=")]
        if named and named[-1] != str(value):
            raise UserError(f"{flag} {value} before -- and {flag} {named[-1]} after it: give it once")
        if not named:
            out += [flag, str(value)]
    return out


def run_nodes(args: argparse.Namespace) -> int:
    """``--nodes``: the torchrun line per node and the SLURM script, after checking the training options."""
    from naspipe.cli.cmd_train import world_config
    from naspipe.cli.nodes import HOST_PLACEHOLDER, IFACE_PLACEHOLDER, make_plan, slurm_script

    train = list(args.train_args)
    if train[:1] == ["--"]:
        train = train[1:]
    if "--out" not in train and not any(a.startswith("--out=") for a in train):
        raise UserError("give --out after --: the run directory, on a file system every node shares (or collect "
                         "each node's parts/ there afterwards)")
    train = _with_run_options(args, train)
    world = args.nodes * args.procs_per_node
    addrs = args.node_addrs.split(",") if args.node_addrs is not None else []  # (given empty: refused as empty)
    ifnames = args.ifname.split(",") if args.ifname is not None else []
    # the node options first: they cost nothing to check, the training options a plan choice
    plan = make_plan(args.nodes, args.procs_per_node, train, addrs, ifnames, port=args.rdzv_port,
                     rdzv_id=args.rdzv_id, join_timeout=args.join_timeout)
    if args.slurm and not ifnames:
        raise UserError("--slurm needs --ifname: the interface of the network the ranks use (one for all nodes, "
                         "or one per node); SLURM picks the nodes, and each looks its own address up on it")
    # the same parse and checks every rank makes (one line, exit 2), on this machine's CPU: the devices are theirs
    cfg, _ = world_config(train, world, device_here=False)
    if args.slurm:
        sys.stdout.write(slurm_script(plan, gpus=cfg.device == "cuda"))
        return 0
    missing = [f"{HOST_PLACEHOLDER.format('<i>')} with node i's address (or give --node-addrs)"] if not addrs else []
    missing += [f"{IFACE_PLACEHOLDER} with its interface (or give --ifname)"] if not ifnames else []
    if missing:
        print(f"naspipe: note: replace {' and '.join(missing)}", file=sys.stderr)
    w = sys.stdout.write
    w(f"# {counted(args.nodes, 'node')} x {counted(args.procs_per_node, 'process', 'processes')} = "
      f"{counted(world, 'rank')} ({counted(cfg.stages, 'stage')} x {counted(cfg.replicas, 'replica')}); run each "
      "line on its node, node 0 first\n")
    for i in range(args.nodes):
        role = f"; it hosts the rendezvous store on port {args.rdzv_port}" if i == 0 else ""
        w(f"# node {i} ({plan.addrs[i]}{role})\n{plan.node_command(i)}\n")
    w("# the same under SLURM: the same command with --slurm prints this script alone, for sbatch as it is\n")
    w(slurm_script(plan, gpus=cfg.device == "cuda"))
    return 0


def _train_refuses(space: object):  # noqa: ANN202
    """``replicas -> reason or None``: train's own check that every block of a user supernet runs on a shard of
    ``batch / replicas`` samples (BatchNorm needs two), so no split train refuses is ranked."""
    def refuses(replicas: int) -> str | None:
        from naspipe.preflight.modelcheck import ModelCheckError, probe_replica_shards

        try:
            probe_replica_shards(space, replicas)  # type: ignore[arg-type]
        except ModelCheckError as e:
            return str(e)
        return None
    return refuses


def run(args: argparse.Namespace) -> int:
    if (args.nodes is None) == (args.devices is None):
        raise UserError("give --devices (rank the splits of N devices) or --nodes (commands for N machines)")
    if args.nodes is not None:
        return run_nodes(args)
    if args.train_args:
        raise UserError(f"unexpected arguments {' '.join(args.train_args)} (training options go with --nodes)")
    space, shared, sampler, alpha, link = _inputs(args)
    rows, refused = _rank_splits(args, space, shared, sampler, alpha, link)
    unit_costs = getattr(space.model, "profiled", None) is False  # a user supernet not profiled yet: no times
    if unit_costs:  # (no bytes either)
        print(f"naspipe: note: unit costs (no bytes: memory and exchange read 0); measure them with naspipe profile "
              f"--space {args.space}", file=sys.stderr)
    if args.json:
        print(json.dumps({"space": space.name, "devices": args.devices, "policy": args.policy,
                          "sampler": str(sampler),
                          "subnets": args.subnets, "link": {"bandwidth": link.bandwidth, "latency": link.latency},
                          "batch_alpha": alpha, "rows": rows, "refused": refused,
                          "time_unit": "unit" if unit_costs else "s"}))
        return 0
    _print_rows(args, space, sampler, alpha, link, rows, "/unit" if unit_costs else "/s")
    return 0


def _inputs(args: argparse.Namespace) -> tuple:
    """``(space, shared, sampler, alpha, link)`` from the arguments; a UserError (one line) for a bad one."""
    from naspipe.cli.common import fixed_sampler_arg
    from naspipe.sched.registry import get_policy
    from naspipe.sequences.samplers import sampler_forms
    from naspipe.spaces.shared import resolve_shared
    from naspipe.spaces.space import resolve_space

    space = resolve_space(args.space)
    shared = resolve_shared(args.shared_layers, space)
    get_policy(args.policy)
    args.sampler_named = args.sampler is not None
    sampler = fixed_sampler_arg(args, "generates the sequence from training losses; a plan needs one fixed up "
                                      f"front ({sampler_forms(online=False, last=', ')})")
    alpha = batch_alpha_from_args(args)
    return space, shared, sampler, alpha, link_from_args(args)


def _rank_splits(args: argparse.Namespace, space, shared, sampler, alpha: float, link) -> tuple[list, list]:  # noqa: ANN001
    """The simulated rows, best first, and the splits train would refuse (each said on stderr)."""
    from naspipe.sim.replicas import plan

    refused: list[dict] = []
    kw = dict(subnets=args.subnets, policy=args.policy, seed=args.seed, window=args.window, shared=shared,
              link=link, alpha=alpha, refuses=_train_refuses(space))
    rows = plan(space, args.devices, sampler=str(sampler), refused=refused, **kw)
    if _compared(args, sampler):
        _compare_with_uniform(space, rows, plan(space, args.devices, sampler="uniform", **kw), args.subnets,
                              args.seed, str(sampler))
    for r in refused:  # what train would refuse is not ranked: say so, and why
        print(f"naspipe: note: {r['stages']} x {r['replicas']} left out: train refuses --replicas {r['replicas']}: "
              f"{r['reason']}", file=sys.stderr)
    if not rows:
        raise UserError(f"no stages x replicas split of {args.devices} devices fits {space.name!r} (stages <= "
                        f"{space.num_blocks} blocks, replicas dividing the batch {space.batch_size}"
                        f"{', a model that runs on the shard' if refused else ''})")
    return rows, refused


def _print_rows(args: argparse.Namespace, space, sampler, alpha: float, link, rows: list, per: str) -> None:  # noqa: ANN001
    """The table, best first (``per``: "/s", or "/unit" for unit costs, which are no seconds)."""
    from naspipe.inputs.memsize import format_bytes

    w = sys.stdout.write
    w(f"{args.devices} devices, {space.name}, {args.policy}, {args.subnets} subnets; link {link.bandwidth / 1e9:g} "
      f"GB/s + {link.latency * 1e6:g} us between replicas, batch alpha {alpha:g}\n")
    tw = len("subnets" + per)  # (9 for subnets/s)
    w(f"{'rank':>4}  {'stages x replicas':>17}  {'subnets' + per:>{tw}}  {'vs best':>7}  {'util':>5}  "
      f"{'exchange':>8}  "
      f"{'batch/replica':>13}  {'memory/replica':>14}\n")
    best = rows[0]["throughput"]
    for i, r in enumerate(rows, 1):
        w(f"{i:>4}  {r['stages']:>8} x {r['replicas']:<6}  {r['throughput']:>{tw}.2f}  {r['throughput'] / best:>7.2f}  "
          f"{r['utilization']:>5.2f}  {100 * r['exchange_share']:>7.1f}%  {r['replica_batch']:>13}  "
          f"{format_bytes(r['memory_per_replica_max']):>14}\n")
    if _compared(args, sampler):
        w(f"sampler {sampler} against uniform (same seed and subnets), per split:\n")
        for r in rows:
            u = r["uniform"]
            w(f"  {r['stages']:>3} x {r['replicas']:<3} {r['throughput']:.2f} vs {u['throughput']:.2f} subnets{per} "
              f"(x{r['speedup']:.2f}), utilisation {r['utilization']:.2f} vs {u['utilization']:.2f}; subnets sharing "
              f"a candidate with one fewer than {r['stages']} places before: {r['sequence']['conflicts']} vs "
              f"{u['sequence']['conflicts']}; min reuse distance {_distance(r)} vs {_distance(u)}\n")


def _compared(args: argparse.Namespace, sampler) -> bool:  # noqa: ANN001
    """``--sampler`` named one other than uniform: each split is compared with the uniform sequence's."""
    return args.sampler_named and sampler.kind != "uniform"


def _compare_with_uniform(space, rows: list[dict], uniform: list[dict], n: int, seed: int, sampler: str) -> None:  # noqa: ANN001
    """Add to every row the uniform sequence's row of the same split, the speedup and both conflict counts."""
    from naspipe.sequences.conflicts import conflict_stats
    from naspipe.sequences.samplers import make_stream

    subs = {s: list(make_stream(space, seed, n, s)) for s in (sampler, "uniform")}
    by_split = {(u["stages"], u["replicas"]): u for u in uniform}
    for r in rows:
        u = dict(by_split[(r["stages"], r["replicas"])])
        u["sequence"] = conflict_stats(space, subs["uniform"], r["stages"])
        r["uniform"] = u
        r["sequence"] = conflict_stats(space, subs[sampler], r["stages"])
        r["speedup"] = r["throughput"] / u["throughput"] if u["throughput"] else None


def _distance(row: dict) -> str:
    """A row's minimum reuse distance; "none" where no candidate is reused (one subnet)."""
    d = row["sequence"]["min_reuse_distance"]
    return "none" if d is None else str(d)
