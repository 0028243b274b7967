"""``naspipe truth --space SPACE --out DIR``: the ground truth, every architecture trained stand-alone.

Trains every architecture of the space (or ``--sample N`` of them, seeded by ``--sample-seed``) for ``--steps``
steps and each of ``--seeds`` seeds, with the supernet's data stream, optimizer and loss, and evaluates it on the
held-out split (``naspipe.truth``). One worker per core (``--workers``); a killed run started again with the
same command trains only the missing entries; a folder holding a truth with other settings is refused by name, and
one another build holds (its lock, ``naspipe.runfolder.runlock``) is refused naming that build. Arguments (``--steps``
at most ``MAX_STEPS``), the space and whether ``entries/`` can be written are checked before any worker starts.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from naspipe.cli.common import add_kernels_argument, counted, named, os_refusal, positive_int
from naspipe.errors import UserError

COMMAND = "truth"
HELP = "train architectures stand-alone (the ground truth naspipe rank compares a supernet with)"
ORDER = 62
MAX_SEEDS = 1000  # a truth's seeds are listed in its settings file: a bound keeps a typo from filling memory
# steps per entry: 10**12 was taken, a build that would never end (the default is 200; a million is days per entry)
MAX_STEPS = 1_000_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    from naspipe.inputs.optim_names import OPTIMIZERS

    p.add_argument("--space", help="preset name, JSON file, or module:function (required to build)")
    p.add_argument("--out", type=named("--out"),
                   help="the truth folder (required to build; started again: continues the build)")
    p.add_argument("--check", type=named("--check"), metavar="DIR", default=None,
                   help="retrain --sample N (default 3) random entries of the finished truth DIR under its kernels "
                        "and compare them bit for bit (exit 0: identical, 1: they differ)")
    p.add_argument("--check-seed", type=int, default=None,
                   help="the seed of --check's random entries (default: a fresh one, printed)")
    p.add_argument("--steps", type=positive_int("--steps", maximum=MAX_STEPS), default=200,
                   help=f"training steps per architecture, at most {MAX_STEPS} (default %(default)s)")
    p.add_argument("--seeds", type=positive_int("--seeds"), default=3,
                   help=f"seeds 0..S-1, at most {MAX_SEEDS} (default %(default)s)")
    p.add_argument("--sample", type=positive_int("--sample"), default=None,
                   help="a seeded sample of N architectures (default: every architecture)")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of --sample (default %(default)s)")
    p.add_argument("--optimizer", default="momentum", choices=OPTIMIZERS,
                   help="the supernet's optimizer (default %(default)s)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the optimizer's default)")
    p.add_argument("--workers", type=positive_int("--workers"), default=None,
                   help="worker processes, one per core (default: the cores this process may use)")
    p.add_argument("--max-archs", type=positive_int("--max-archs"), default=5000,
                   help="refuse to train more architectures than this: a larger space needs --sample N, and N "
                        "itself must not be larger (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_kernels_argument(p)


def run(args: argparse.Namespace) -> int:
    if args.check is not None:
        return _check(args)
    out, lr, space, n = _inputs(args)
    settings = _settings(args, space, n, lr)
    from naspipe.fileio.atomic import write_text_atomic
    from naspipe.truth.records import SPACE_JSON, start
    from naspipe.truth.workers import build_truth, holding

    with ExitStack() as held:
        with os_refusal(f"--out {str(out)!r} cannot be written"):
            held.enter_context(holding(out))  # (TruthError: another build holds the folder)
            start(out, settings)
            if args.space.endswith(".json") and not (out / SPACE_JSON).exists():
                write_text_atomic(out / SPACE_JSON, space.to_json() + "\n")  # naspipe rank resolves the runs' space
        workers = _workers(args.workers)
        if not args.no_progress:  # with its bar: where its bits hold, if less widely than its kernels' name says
            from naspipe.lifecycle import kernels

            kernels.announce(settings.kernels, settings.optimizer)
        t0 = time.perf_counter()
        # (a TruthError: a stored entry that cannot be used, a candidate that raised, another space)
        truth = build_truth(space, args.space, out, settings, workers=workers, progress=not args.no_progress)
        wall = time.perf_counter() - t0
    assert truth is not None
    from naspipe.ranking.stats import MIN_ARCHS, seed_floor

    if len(truth.archs) < MIN_ARCHS:
        tau = f"; seed-to-seed Kendall tau n/a (too few architectures to rank: at least {MIN_ARCHS})"
    else:
        floor = seed_floor(truth)
        tau = f"; seed-to-seed Kendall tau {floor.text()}" if floor is not None else ""
    print(f"truth: {counted(len(truth.archs), 'architecture')} x {counted(len(settings.seeds), 'seed')} of "
          f"{space.name} ({settings.steps} steps, {settings.optimizer} lr {settings.lr:g}) in {wall:.1f} s{tau}; "
          f"wrote {out}")
    return 0


def _inputs(args: argparse.Namespace) -> tuple[Path, float, Any, int]:
    """``(out, lr, space, architectures in it)`` from the arguments; a UserError (one line) for a bad one."""
    for option, value in (("--space", args.space), ("--out", args.out)):
        if value is None:
            raise UserError(f"the following arguments are required to build a truth: {option} (or --check DIR)")
    from naspipe.inputs.optim_names import lr_error, lr_or_default

    lr = lr_or_default(args.optimizer, args.lr)
    if (why := lr_error(lr)) is not None:
        raise UserError(f"--lr {why}")
    if args.seeds > MAX_SEEDS:
        raise UserError(f"--seeds must be <= {MAX_SEEDS}, got {args.seeds}")
    from naspipe.fileio.atomic import check_writable

    out = Path(args.out)
    with os_refusal(f"--out {str(out)[:80]!r}... cannot be used"):  # a name too long, a loop of links
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {str(out)!r} exists and is not a directory")
        check_writable(out, "--out")
    import naspipe.supernet  # noqa: F401 - registers the module:function resolver
    from naspipe.models import model_kind
    from naspipe.spaces.space import resolve_space
    from naspipe.truth.records import space_size

    space = resolve_space(args.space)
    model_kind(space)
    n = space_size(space)
    if args.sample is None and n > args.max_archs:
        raise UserError(f"space {space.name!r} has {counted(n, 'architecture')} (more than --max-archs "
                        f"{args.max_archs}); pass --sample N")
    if args.sample is not None and min(args.sample, n) > args.max_archs:
        raise UserError(f"--sample {args.sample} is more than --max-archs {args.max_archs} (space {space.name!r} "
                        f"has {counted(n, 'architecture')}); pass a smaller --sample, or a larger --max-archs to "
                        "mean it")
    return out, lr, space, n


def _settings(args: argparse.Namespace, space: Any, n: int, lr: float) -> Any:
    """The truth's settings, with the digest of what the supernet computes (taken in a spawned interpreter, where
    per-process state in a user's supernet's weights shows)."""
    from naspipe.lifecycle import kernels
    from naspipe.preflight.behaviour import take
    from naspipe.runfolder.runs import machine_of
    from naspipe.supernet.load import KIND
    from naspipe.truth.records import TruthSettings, choose_archs

    behaviour = take(space, args.kernels, fresh=space.model.get("kind") == KIND)["behaviour_sha256"]
    sampled = args.sample is not None and args.sample < n
    return TruthSettings(space=space.name, space_digest=space.digest(), steps=args.steps,
                         seeds=tuple(range(args.seeds)), optimizer=args.optimizer, lr=float(lr),
                         archs=choose_archs(space, args.sample, args.sample_seed),
                         sample=args.sample if sampled else None,
                         sample_seed=args.sample_seed if sampled else None,
                         kernels=args.kernels, behaviour_sha256=behaviour,
                         behaviour_on=machine_of({"kernels": args.kernels, **kernels.machine(args.kernels)}))


def _check(args: argparse.Namespace) -> int:
    """``--check DIR``: the one-line verdict of ``naspipe.truth.check``; exit 0 identical, 1 differ."""
    from naspipe.errors import UserError
    from naspipe.truth.check import check_truth

    given = [o for o, v in (("--space", args.space), ("--out", args.out)) if v is not None]
    if given:
        raise UserError(f"--check DIR retrains a finished truth with its own settings and kernels; it takes "
                        f"--sample and --check-seed, not {' or '.join(given)}")
    result = check_truth(args.check, sample=args.sample or 3, seed=args.check_seed)
    print(f"truth check: {result.line}")
    return 0 if result.ok else 1


def _workers(asked: int | None) -> int:
    """``--workers``, by default the cores this process may use; more than those is said on stderr (each worker
    holds its own torch and model, and they take turns on the cores: more memory, no more speed)."""
    from naspipe.cli.cmd_demo import usable_cores

    cores = usable_cores()
    if asked is not None and asked > cores:
        print(f"naspipe: note: --workers {asked} is more than the {cores} core{'s' if cores > 1 else ''} this process "
              f"may use: the workers take turns on them, each with its own torch and model (more memory and slower "
              f"than --workers {cores})", file=sys.stderr)
    return cores if asked is None else asked
