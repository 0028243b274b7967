"""``naspipe train``: train a supernet with one process per pipeline stage (``naspipe.runtime``).

Every argument is validated before any process starts (one line, exit code 2). A failed stage ends the
run with exit code 1 and a line naming the rank. Writes ``losses.csv``, ``params.json``, ``trace.json``,
``metrics.json``, ``events.jsonl`` and ``status.json`` to ``--out``; ``naspipe verify OUT REF`` compares
the run with ``naspipe reference``.

``--checkpoint-every N`` saves every stage's state at subnets N, 2N, ... into ``OUT/checkpoint/``, keeping the
newest complete one (``--keep-checkpoints K``: the K newest, which ``naspipe rank --ensemble-last`` averages);
``--resume DIR`` continues such a run from its newest complete checkpoint, bit-identical to an
uninterrupted run; give the interrupted run's arguments again (``naspipe.runtime.checkpoint`` lists
which may differ). A missing, corrupted or foreign checkpoint is refused like any bad argument.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from naspipe.cli.common import (
    add_kernels_argument,
    add_run_arguments,
    named,
    non_negative_float,
    positive_float,
    positive_int,
    resolve_run,
    thread_count,
)
from naspipe.errors import UserError
from naspipe.runspec.few_shot_run import add_few_shot_arguments

COMMAND = "train"
HELP = "train a supernet on one process per pipeline stage (torch.distributed) and record the run"
ORDER = 30


def add_arguments(p: argparse.ArgumentParser) -> None:
    # no torch import here: building the parser must stay cheap for every subcommand
    from naspipe.cli.common import add_optimizer_arguments, add_sampler_argument  # as the reference's
    from naspipe.runspec.spec import REPLICA_EXCHANGES
    from naspipe.runtime.config import BALANCES, DEVICES, START_METHODS  # (torch-free)

    add_run_arguments(p, default_space="tiny-transformer", default_subnets=200)
    add_optimizer_arguments(p)
    add_sampler_argument(p)
    add_few_shot_arguments(p)  # --few-shot BLOCK, --few-shot-warmup W (docs/few-shot.md)
    p.add_argument("--out", type=named("--out"), default=None,
                   help="run directory (refused if it holds another run); required unless --resume")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    _add_checkpoint_arguments(p)
    p.add_argument("--jitter-ms", type=non_negative_float("--jitter-ms"), default=0.0,
                   help="seeded random delay of 0..X ms before every task (results must not change)")
    add_kernels_argument(p)
    p.add_argument("--threads", type=thread_count, default=1,
                   help="intra-op threads per stage process (default %(default)s, as the reference)")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="cpu (gloo) or cuda (NCCL, one GPU per stage); default %(default)s")
    p.add_argument("--timeout", type=positive_float("--timeout", "seconds"), default=120.0,
                   help="seconds any wait may last before the run fails (default %(default)s)")
    p.add_argument("--micro-batches", type=positive_int("--micro-batches"), default=None, help="bsp group size M")
    p.add_argument("--max-pending-w", type=positive_int("--max-pending-w"), default=None,
                   help="csp-bw: most W tasks pending per stage")
    p.add_argument("--policy-option", action="append", default=[], metavar="KEY=VALUE",
                   help="option of an asynchronous baseline, repeatable: pipemare t1=K t2=D warmup=N tau=T; "
                        "pipeoptim s=stage|inflight|N offset=K warmup=N; 2bw group=M; pipedream warmup=N; "
                        "csp-plan plan=S (no planning) eps=E")
    p.add_argument("--port", type=positive_int("--port"), default=None,
                   help="rendezvous port on 127.0.0.1 (default: a free one)")
    p.add_argument("--balance", choices=BALANCES, default="cost",
                   help="partition blocks by the space's cost model or by costs measured here (default %(default)s)")
    p.add_argument("--start-method", choices=START_METHODS, default="forkserver",
                   help="how stage processes start (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print metrics.json to stdout")
    _add_memory_arguments(p)
    p.add_argument("--replicas", type=positive_int("--replicas"), default=1, metavar="R",
                   help="data-parallel replicas of every stage: stages x R processes, each batch split into R "
                        "shards, gradients combined in replica order (default %(default)s)")
    p.add_argument("--replica-exchange", choices=REPLICA_EXCHANGES, default="exact",
                   help="exact: gather and sum in replica order, bit-identical to reference --replicas R (default); "
                        "native: the backend's all-reduce, reproducible run to run but not comparable")
    p.add_argument("--fault", default=None, help=argparse.SUPPRESS)  # ACTION:STAGE:SUBNET, for tests


def _add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """``--checkpoint-every``, ``--keep-checkpoints`` and ``--resume``: a run's checkpoints, kept and resumed."""
    p.add_argument("--checkpoint-every", type=positive_int("--checkpoint-every"), default=None, metavar="N",
                   help="save every stage's state at subnets N, 2N, ... to OUT/checkpoint/")
    p.add_argument("--keep-checkpoints", type=positive_int("--keep-checkpoints"), default=1, metavar="K",
                   help="with --checkpoint-every: keep the K newest complete checkpoints, not only the newest "
                        "(naspipe rank --ensemble-last averages them; default %(default)s)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run in DIR from its last complete checkpoint; give the interrupted "
                        "run's arguments again (--out defaults to DIR)")


def _add_memory_arguments(p: argparse.ArgumentParser) -> None:
    """``--device-memory`` and what it enables: ``--swap``, ``--prefetch-depth``, ``--pin``."""
    p.add_argument("--device-memory", default=None, metavar="SIZE|P%",
                   help="context switching: each stage keeps its candidates in host memory and at most SIZE "
                        "bytes (2GiB) or P%% of its supernet share (25%%) on the device (cpu: a separate buffer pool)")
    from naspipe.sim.memory import PIN_MODES, SWAP_MODES

    p.add_argument("--swap", choices=SWAP_MODES, default=None,
                   help="with --device-memory: prefetch the forecast tasks' candidates, load on demand and "
                        "evict right after use, or keep the whole stage share resident (must fit; default "
                        "predictive)")
    p.add_argument("--prefetch-depth", type=positive_int("--prefetch-depth"), default=None, metavar="N",
                   help="with --swap predictive: forwards to prefetch ahead (default 4)")
    p.add_argument("--pin", choices=PIN_MODES, default=None,
                   help="with --device-memory: keep a candidate pinned from its subnet's forward to the update "
                        "(subnet, default: the budget counts candidates only) or only while a task uses it (task: "
                        "autograd saves it by reference, so it may leave the device between forward and backward, "
                        "which pays off when activations compete for the device)")


def with_policy_options(policy: str, options: list[str]) -> str:
    """``policy`` with ``--policy-option`` values appended (``pipemare:t1=200,t2=0.1``); checked."""
    if not options:
        return policy
    from naspipe.sched.registry import get_policy, parse_policy, policy_names

    name, _, arg = policy.partition(":")
    keyed = [n for n in policy_names() if get_policy(n).options]  # policies that declare options (one grammar)
    if name not in keyed:
        raise UserError(f"--policy-option is for the policies with options, {', '.join(keyed)}, not {name!r}")
    full = f"{name}:{','.join([a for a in [arg] if a] + options)}"
    given = {k: f"--policy {policy}" for k in parse_policy(policy)[1]}  # option -> where it was set
    for opt in options:
        for key in parse_policy(f"{name}:{opt}")[1]:
            if key in given:
                raise UserError(f"--policy-option {opt} sets {name} option {key!r}, which {given[key]} "
                                "already sets; give each option once")
            given[key] = f"--policy-option {opt}"
    parse_policy(full)
    return full


def config_from_args(args: argparse.Namespace, check_out: bool = True) -> Any:
    """A prepared ``TrainConfig`` from parsed arguments (``naspipe.runtime.preparation``); raises a UserError
    (one line).

    ``check_out``: also refuse an output directory that holds another run (unless ``--overwrite``).
    """

    from naspipe.cli.common import sampler_from_args

    spec = sampler_from_args(args)
    swapping = {"--swap": args.swap, "--prefetch-depth": args.prefetch_depth, "--pin": args.pin}
    if args.device_memory is None and any(v is not None for v in swapping.values()):
        given = ", ".join(k for k, v in swapping.items() if v is not None)
        raise UserError(f"{given} only apply with --device-memory SIZE|P%")
    if args.out is None:
        if not args.resume:
            raise UserError("--out is required (or --resume DIR to continue the run in DIR)")
        from naspipe.runtime.checkpoint import locate

        args.out = str(locate(args.resume)[0])
    if args.keep_checkpoints > 1 and args.checkpoint_every is None:
        raise UserError(f"--keep-checkpoints {args.keep_checkpoints} needs --checkpoint-every N: without it the run "
                        "writes no checkpoints to keep")
    run = resolve_run(args)
    policy = with_policy_options(run.policy, args.policy_option)
    from naspipe.runtime.checkpoint import resumes_in_place
    from naspipe.runtime.config import TrainConfig, check_out_dir, measured_partition

    part = run.partition
    if args.balance == "measured" and part.stages > 1:
        part = measured_partition(run.space, part.stages, run.seed)
    cfg = TrainConfig.from_spec(
        dataclasses.replace(run, partition=part, policy=policy), args.out, balance=args.balance, sampler=str(spec),
        optimizer=args.optimizer, lr=args.lr, jitter_ms=args.jitter_ms, kernels=args.kernels,
        threads=args.threads, device=args.device, timeout=args.timeout, micro_batches=args.micro_batches,
        max_pending_w=args.max_pending_w, port=args.port, overwrite=args.overwrite,
        progress=not args.no_progress, fault=args.fault, start_method=args.start_method,
        checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints,
        device_memory=args.device_memory,
        replicas=args.replicas, replica_exchange=args.replica_exchange, resume=args.resume,
        # options not given keep TrainConfig's defaults (declared once, there)
        **{k: v for k, v in (("swap", args.swap), ("prefetch_depth", args.prefetch_depth), ("pin", args.pin))
           if v is not None})
    # (from_spec prepared it, once: model probed, plan chosen, --resume applied; naspipe.runtime.preparation)
    if check_out and not resumes_in_place(cfg):  # the files it reads are inputs: --overwrite must not delete them
        check_out_dir(cfg.out, cfg.overwrite, inputs=[f for f in (args.sequence, args.space) if f])
    return cfg


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UserError(f"{self.prog}: {message}")


def world_config(argv: Sequence[str] | None, world: int, check_out: bool = False,
                 device_here: bool = True) -> tuple[Any, float]:
    """The options of ``python -m naspipe.torchrun`` for ``world`` processes: ``(config, connect timeout)``;
    ``--stages`` defaults to the world size over ``--replicas`` (a UserError when they cannot match).
    ``device_here=False``: the run is for other machines (``naspipe plan --nodes``), so ``--device cuda`` is
    checked on this machine's CPU and kept in the config, not refused for a GPU this machine lacks."""
    parser = _Parser(prog="python -m naspipe.torchrun", description="the torchrun entry point")
    add_arguments(parser)
    parser.add_argument("--connect-timeout", type=positive_float("--connect-timeout", "seconds"), default=60.0,
                        help="seconds every rank waits for the others to arrive (default %(default)s)")
    parser.set_defaults(stages=None, _argv=None)
    args = parser.parse_args(argv)
    replicas = args.replicas
    if args.stages is None:
        args.stages = world // replicas
    if args.stages * replicas != world:
        raise UserError(f"--stages {args.stages} x --replicas {replicas} differs from the {world} processes "
                         "torchrun started; use one process per stage and replica")
    device = args.device
    if not device_here:
        args.device = "cpu"
    cfg = config_from_args(args, check_out=check_out)
    if cfg.device != device:
        cfg = dataclasses.replace(cfg, device=device)
    return cfg, args.connect_timeout


def summary_line(m: dict[str, Any]) -> str:
    c = m["config"]
    reps = f" x {c['replicas']} replicas" if c.get("replicas", 1) != 1 else ""
    from naspipe.runtime.outputs import trained_text

    return (f"{c['policy']} on {c['space']}, {c['stages']} stages{reps}, {trained_text(m)}, shared layers "
            f"{c['shared_layers']}: {m['subnets_per_s']:.2f} subnets/s ({m['samples_per_s']:.0f} samples/s) over "
            f"the training time, start-up excluded (the progress bar's rate includes it), "
            f"makespan {m['makespan_s']:.2f} s, utilisation {m['utilization']:.2f}, "
            f"overhead {100 * m['overhead_share']:.1f}% of compute" + _memory_line(m))


def _memory_line(m: dict[str, Any]) -> str:
    mem = m.get("memory")
    if not mem:
        return ""
    return (f"; swap {mem['swap']}: hit rate {100 * mem['hit_rate']:.1f}%, stall {100 * mem['stall_share']:.1f}% "
            f"of the loop, {mem['bytes_moved']} bytes moved, peak device bytes {mem['peak_device_bytes']}")


def resume_hint(saved: int, args: argparse.Namespace) -> str:
    """How to continue a failed or stopped run from checkpoint ``saved``: this command line, without an injected
    ``--fault`` (it would fire again) or an earlier ``--resume``, with ``--resume OUT``."""
    from naspipe.runtime.processes.launcher import resume_hint as hint

    argv = args._argv  # (set by naspipe.cli.main; None under the torchrun entry point)
    if argv is None:
        return hint(saved, args.out)
    kept, skip = [], False
    for tok in argv:
        name = tok.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) > 2 and name.startswith("--") and ("--fault".startswith(name) or "--resume".startswith(name)):
            skip = "=" not in tok  # (argparse took any unambiguous prefix: these are the options themselves)
        else:
            kept.append(tok)
    return hint(saved, args.out, shlex.join(["naspipe", *kept, "--resume", str(args.out)]))


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    from naspipe.lifecycle import kernels
    from naspipe.runtime.processes.launcher import TrainError, train
    from naspipe.spaces.shared import announce

    if cfg.progress:  # what the fixed blocks do, before any process starts (with the bar: --no-progress is quiet)
        announce(cfg.space, cfg.shared)
        kernels.announce(cfg.kernels, cfg.optimizer)

    try:
        result = train(cfg)  # (a ConfigError, e.g. the port taken in the meantime, is a refusal: exit code 2)
    except TrainError as e:
        hint = f"; {resume_hint(e.checkpoint, args)}" if e.checkpoint is not None else ""
        print(f"naspipe: error: {e.base}{hint}", file=sys.stderr)
        return 1
    from naspipe.cli.common import warn_if_diverged

    warn_if_diverged(result.losses)
    if args.json:
        print(json.dumps(result.metrics))
    else:
        print(summary_line(result.metrics))
        from naspipe.runtime.outputs import boundaries_line

        line = boundaries_line(result.metrics)
        if line is not None:
            print(line)
        print(f"wrote {cfg.out}")
    return 0
