"""``naspipe reference``: train a subnet sequence with the independent sequential trainer.

Takes the same options as ``naspipe train`` (``--stages/--policy/--window`` are accepted and ignored:
the reference has one stage and no schedule) and writes ``losses.csv``, ``params.json`` and
``metrics.json`` to ``--out``, the files ``naspipe verify`` compares, ``weights.pt`` (the trained supernet,
``naspipe.models.weights``), which ``naspipe search`` reads, and ``status.json`` as ``naspipe train`` does
(complete, or
how the run ended: Ctrl-C and SIGTERM both write it before the command exits with 130 or 143).
``--sampler evolution[:LAG]`` generates the
sequence at run time from the training losses, ``fair`` and ``spread`` from the seed (``naspipe.sequences.samplers``);
the sequence such a sampler produced is also written to ``sequence.json`` (replayable with ``--sequence``).
``run.json`` records the run's kind and identity
(``naspipe.runfolder.runs``, threads included: compare ``train --threads N`` with ``reference --threads N``); a
folder holding
a train run, or files no naspipe run wrote, is refused unless ``--overwrite``, which clears it first; a reference
replaces an earlier reference, deleting only its files and never the ``--sequence`` it reads, under the folder's
lock (``naspipe.runfolder.runlock``; docs/run-folders.md). The model is checked before training
(``naspipe.preflight.modelcheck``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe.cli.common import (
    add_kernels_argument,
    add_optimizer_arguments,
    add_run_arguments,
    add_sampler_argument,
    named,
    os_refusal,
    positive_int,
    resolve_run,
    sampler_from_args,
    thread_count,
)
from naspipe.errors import UserError
from naspipe.runspec.few_shot_run import add_few_shot_arguments

if TYPE_CHECKING:
    from naspipe.sequences.samplers import SamplerSpec

COMMAND = "reference"
HELP = "train subnets one at a time (the sequential oracle) and write losses and parameter hashes"
ORDER = 40


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p, default_space="tiny-transformer", default_subnets=200, default_policy="sequential",
                      ignored="the reference trains one subnet at a time in sequence order, on one process "
                              "(so a train command line runs unchanged)")
    add_optimizer_arguments(p)
    add_sampler_argument(p)
    add_few_shot_arguments(p)  # --few-shot BLOCK, --few-shot-warmup W (docs/few-shot.md)
    p.add_argument("--out", type=named("--out"), required=True,
                   help="directory for losses.csv, params.json, metrics.json, weights.pt (refused if it holds "
                        "a train run or files no naspipe run wrote)")
    p.add_argument("--overwrite", action="store_true", help="clear a run already in --out first")
    add_kernels_argument(p)
    p.add_argument("--threads", type=thread_count, default=1,
                   help="intra-op threads (default %(default)s); compare with train runs of the same --threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(_api=False)  # naspipe.reference(...) sets it: failures raise instead of printing
    p.add_argument("--replicas", type=positive_int("--replicas"), default=1, metavar="R",
                   help="split each batch into R shards and combine their gradients in replica order, as "
                        "train --replicas R does (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    from naspipe.lifecycle import kernels

    if not kernels.runs_here(args.kernels):  # this process computes under other kernels (a notebook, a test)
        return kernels.in_fresh_process(args.kernels, run, args)
    spec, cfg, out = _inputs(args)
    if spec.online:
        from naspipe.sequences.samplers import make_stream

        cfg = dataclasses.replace(cfg, stream=make_stream(cfg.space, cfg.seed, len(cfg.stream), spec))
    digest = getattr(cfg.stream, "digest", None)
    from naspipe.runtime.processes.signals import terminate_raises

    with terminate_raises():  # SIGTERM ends the reference as Ctrl-C does (status.json says which)
        result = _train_locked(args, cfg, spec, out, _identity(args, cfg, spec, digest), digest)
    if isinstance(result, int):
        return result
    from naspipe.cli.common import warn_if_diverged

    warn_if_diverged(result.losses)
    if not args._api:
        print(f"reference: {len(result.losses)} subnets of {cfg.space.name} in {result.wall_s:.2f} s "
              f"(shared layers {cfg.shared}, {args.optimizer}); wrote {out}")
    return 0


def _inputs(args: argparse.Namespace) -> tuple[SamplerSpec, Any, Path]:
    """``(sampler, run description, out)`` from the arguments, every check made; a UserError (one line) if bad."""
    spec = sampler_from_args(args)
    args.stages = 1  # accepted and ignored: the reference has one stage (a supernet of few blocks needs no --stages)
    cfg = resolve_run(args)
    from naspipe.preflight.modelcheck import check_model

    check_model(cfg.space, cfg.seed, cfg.shared)
    from naspipe.inputs.optim_names import lr_error
    from naspipe.runtime.config import threads_error

    for option, why in (("--lr", None if args.lr is None else lr_error(args.lr)),
                        ("--threads", threads_error(args.threads))):
        if why is not None:  # (the command's argparse types refused them already: naspipe.reference's options)
            raise UserError(f"{option} {why}")
    out = Path(args.out)
    _check_out(out, args.overwrite)  # (a file there, or a name too long, first)
    from naspipe.runtime.config import check_sequence_size
    from naspipe.spaces.space import replicas_error

    check_sequence_size(cfg.space, len(cfg.stream), 1)
    if (why := replicas_error(cfg.space.batch_size, args.replicas)) is not None:
        raise UserError(f"--{why} of {cfg.space.name!r}")
    if args.replicas > 1 and spec.online:
        raise UserError(f"--replicas > 1 needs a fixed sequence; --sampler {spec} generates it at run time")
    from naspipe.preflight.modelcheck import probe_replica_shards

    probe_replica_shards(cfg.space, args.replicas)  # a user supernet's shard of B/R samples runs
    return spec, cfg, out


def _identity(args: argparse.Namespace, cfg: Any, spec: SamplerSpec, digest: Any) -> dict[str, Any]:
    """The run's identity (``run.json``); a sequence generated at run time is known once trained."""
    from naspipe.inputs.optim_names import lr_or_default
    from naspipe.lifecycle.kernels import machine
    from naspipe.runfolder import runs
    from naspipe.sequences.sequence import subnets_digest

    sequence_sha256, subnets = None, None
    if not spec.online:  # (result.save records a generated one)
        sequence_sha256 = digest() if digest else None
        subnets = subnets_digest([cfg.stream[j] for j in range(len(cfg.stream))])
    return runs.identity(space=cfg.space, seed=cfg.seed, subnets=len(cfg.stream), sampler=str(spec),
                         sequence_sha256=sequence_sha256, optimizer=args.optimizer,
                         lr=lr_or_default(args.optimizer, args.lr), threads=args.threads,
                         shared_layers=str(cfg.shared), replicas=args.replicas,
                         replica_exchange="exact" if args.replicas > 1 else None, subnets_sha256=subnets,
                         kernels=args.kernels, machine=machine(args.kernels))


def _train_locked(args: argparse.Namespace, cfg: Any, spec: SamplerSpec, out: Path, ident: dict[str, Any],
                  digest: Any) -> Any:
    """Train and save the reference under the folder's lock: its result, or the exit code of a failed run.
    ``status.json`` says how the run ended: complete, the user code's failure, or the signal that stopped it."""
    from naspipe.oracle.sequential_trainer import ReferenceFailed
    from naspipe.preflight.behaviour import BehaviourError
    from naspipe.runfolder import runs
    from naspipe.runfolder.runlock import release
    from naspipe.runtime.outputs import write_status
    from naspipe.runtime.processes.signals import Terminated, deferred

    lock = _lock(out)  # the folder is this run's until its last file is written (a second writer is refused)
    try:
        _check_out(out, args.overwrite)  # again, under the lock: another run may have written there meanwhile
        with os_refusal(f"--out {str(out)!r} cannot be written"):
            inputs = [f for f in (args.sequence, args.space) if isinstance(f, (str, Path)) and f]
            runs.clear(out, keep=inputs, kind="reference")  # never an input it reads
            runs.write_run(out, "reference", ident)
        if not args.no_progress:  # every check passed; with the progress bar (--no-progress keeps stderr quiet)
            from naspipe.lifecycle import kernels
            from naspipe.spaces.shared import announce

            announce(cfg.space, cfg.shared, "shared_layers=" if args._api else "--shared-layers")
            kernels.announce(args.kernels, args.optimizer)
        try:
            return _train_and_save(args, cfg, spec, out, digest)
        except (ReferenceFailed, BehaviourError) as e:  # user code failed partway (one line, as a stage's failure)
            write_status(out, False, str(e))
            if args._api:
                raise
            print(f"naspipe: error: {e}", file=sys.stderr)
            return 1
        except OSError as e:  # a full disk: one line (every file is written atomically: none is half written)
            from naspipe.fileio.atomic import disk_full_message, is_disk_full

            msg = disk_full_message(out, e) if is_disk_full(e) else str(e)
            write_status(out, False, msg)
            if args._api:
                raise
            print(f"naspipe: error: {msg}", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, Terminated) as e:
            with deferred():  # a second Ctrl-C (or SIGTERM) waits until status.json says how the run ended
                write_status(out, False, "terminated by SIGTERM" if isinstance(e, Terminated)
                             else "interrupted (SIGINT)")
            raise  # (naspipe's main prints the one line and exits 143 or 130)
    finally:
        release(out, lock)


def _lock(out: Path) -> Any:
    """The lock of the run folder ``out``; another run holding it, or a folder that cannot be written, is refused."""
    from naspipe.runfolder.runlock import RunLocked, acquire

    try:
        with os_refusal(f"--out {str(out)!r} cannot be written"):
            return acquire(out)
    except RunLocked as e:  # (a RuntimeError where the launcher meets it; here a refusal)
        raise UserError(str(e)) from None


def _train_and_save(args: argparse.Namespace, cfg: Any, spec: SamplerSpec, out: Path, digest: Any) -> Any:
    """Train the reference and write its files, ``status.json`` last (complete)."""
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.preflight.behaviour import take
    from naspipe.runfolder import runs
    from naspipe.runtime.outputs import write_status
    from naspipe.sequences.sequence import save_sequence

    result = train_reference(cfg.space, cfg.stream, cfg.seed, cfg.shared, optimizer=args.optimizer,
                             lr=args.lr, progress=not args.no_progress, threads=args.threads,
                             replicas=args.replicas)
    # what the supernet computes, taken here (this process computes under the run's kernels) and after
    # training, so user code that counts its calls trains as it would without it
    behaviour = take(cfg.space, args.kernels, fresh=False)["behaviour_sha256"]
    n = len(result.losses)
    result.save(out, weights=True, metrics={
        "command": COMMAND,
        "final_loss": result.losses[n - 1] if n else None,
        "config": {**result.config, "sequence_sha256": digest() if digest else None,
                   "sequence": args.sequence, "sampler": str(spec),
                   "behaviour_sha256": behaviour},
    })
    if spec.kind != "uniform":  # generated (or made by fair/spread): replayable with --sequence
        save_sequence(cfg.stream, out / runs.SEQUENCE)
    write_status(out, True)
    return result


def write(space: Any, out: str | Path, **options: Any) -> Path:
    """``naspipe.reference``: this command from Python, on the same code path (its checks, ``run.json``, files).

    ``space``: a ``naspipe.Supernet`` (e.g. defined in a notebook), a preset, a JSON file or ``module:function``;
    ``options``: the command's options by their Python names (``subnets``, ``seed``, ``shared_layers``,
    ``optimizer``, ``lr``, ``threads``, ``replicas``, ``sequence``, ``sampler``, ``overwrite``, ``progress``).
    Raises ``RunSpecError`` (one line) where the command exits 2, ``ReferenceFailed`` where user code failed."""
    from naspipe.inputs.paths import out_name_error
    from naspipe.runspec.spec import RunSpecError

    if (why := out_name_error(str(out))) is not None:  # (what --out refuses in argparse: an exit there)
        raise RunSpecError(f"out {why}")
    parser = argparse.ArgumentParser(prog="naspipe.reference")
    add_arguments(parser)
    args = parser.parse_args(["--out", str(out)])
    progress = bool(options.pop("progress", False))
    known = {a.dest for a in parser._actions} - {"help", "out", "stages", "policy", "window", "no_progress"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"naspipe.reference() got unexpected options {', '.join(unknown)}; "
                        f"it takes {', '.join(sorted(known))}, progress")
    for k, v in options.items():
        setattr(args, k, str(v) if k == "shared_layers" else v)
    args.space, args.no_progress, args._api = space, not progress, True
    from naspipe.preflight.behaviour import BehaviourError

    try:
        run(args)
    except (RunSpecError, BehaviourError):  # (a BehaviourError here: user code failed partway, not a refusal)
        raise
    except UserError as e:  # every refusal, as the one type this function promises
        raise RunSpecError(str(e)) from None
    return Path(out)


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse a folder that holds a train run or files no naspipe run wrote (unless ``overwrite``), a link or
    folder under a name the run writes, or one that cannot be written (``naspipe.runtime.rundir``)."""
    from naspipe.runtime.config import check_out_dir

    check_out_dir(out, overwrite, kind="reference")
