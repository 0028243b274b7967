"""Arguments shared by several subcommands, and their validation into library objects."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from naspipe.errors import UserError
from naspipe.runspec.spec import DEFAULT_POLICY, DEFAULT_SHARED, DEFAULT_WINDOW, RunSpec, SequenceTooShort
from naspipe.sched.policies import POLICIES
from naspipe.spaces.shared import SHARED_MODES

if TYPE_CHECKING:
    from naspipe.sequences.samplers import SamplerSpec




def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural but for one ("1 architecture", "2 seeds", "2 processes" with ``plural``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


@contextmanager
def os_refusal(prefix: str = "", say: Callable[[OSError], str] | None = None) -> Iterator[None]:
    """An OSError in the block is a refusal: ``say(error)``, else ``<prefix>: <the system's reason>`` (a
    ``NotWritable``, whose message names the path and why, as it is). The one place the commands turn the system's
    errors into refusals."""
    from naspipe.fileio.atomic import NotWritable

    try:
        yield
    except OSError as e:
        if say is None:
            say = lambda e: str(e) if isinstance(e, NotWritable) else f"{prefix}: {e.strerror or e}"  # noqa: E731
        raise UserError(say(e)) from None


def positive_int(name: str, minimum: int = 1, maximum: int | None = None):  # noqa: ANN201
    def rule(v: int, _text: str) -> str | None:
        if v < minimum:
            return f"must be >= {minimum}, got {v}"
        return f"must be <= {maximum}, got {v}" if maximum is not None and v > maximum else None
    return _ruled(name, int, "whole number", rule)


def non_negative_float(name: str):  # noqa: ANN201
    def rule(v: float, text: str) -> str | None:
        return None if v >= 0 and v != float("inf") else f"must be a finite number >= 0, got {text}"
    return _ruled(name, float, "number", rule)


def positive_float(name: str, unit: str = ""):  # noqa: ANN201
    """An argparse type for a finite number > 0 (``unit``, e.g. "seconds", names what it counts)."""
    what = f"number of {unit}" if unit else "number"

    def rule(v: float, text: str) -> str | None:
        return None if 0 < v < float("inf") else f"must be a finite {what} > 0, got {text}"
    return _ruled(name, float, what, rule)


def named(option: str, what: str = "folder"):  # noqa: ANN201
    """An argparse type for a path option (``--out``) that refuses an empty name (``--out "$UNSET"`` would
    otherwise write into the current folder) and one holding a control character (``naspipe.inputs.paths``)."""
    def parse(text: str) -> str:
        from naspipe.inputs.paths import out_name_error

        if (why := out_name_error(text, what)) is not None:
            raise argparse.ArgumentTypeError(f"{option} {why}")
        return text
    return parse


def _ruled(option: str, convert: Callable[[str], Any], what: str,  # noqa: ANN202
           rule: Callable[[Any, str], str | None]):
    """An argparse type: ``convert`` the text (else "must be a ``what``"), then refuse what ``rule(value, text)``
    says why."""
    def parse(text: str) -> Any:
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be a {what}, got {text!r}") from None
        if (why := rule(v, text)) is not None:
            raise argparse.ArgumentTypeError(f"{option} {why}")
        return v
    return parse


def _lr_error(v: float, _text: str) -> str | None:
    from naspipe.inputs.optim_names import lr_error

    return lr_error(v)


def _threads_error(v: int, _text: str) -> str | None:
    from naspipe.runtime.config import threads_error  # (imported when the option is given)

    return threads_error(v)


learning_rate = _ruled("--lr", float, "number", _lr_error)  # the type of --lr (naspipe.inputs.optim_names.lr_error)
thread_count = _ruled("--threads", int, "whole number", _threads_error)  # (naspipe.runtime.config.threads_error)


def _kernels_error(v: str, _text: str) -> str | None:
    from naspipe.lifecycle.kernels import kind_error

    return kind_error(v)


def add_kernels_argument(p: argparse.ArgumentParser) -> None:
    """``--kernels KIND``: which CPU kernels every process of the run computes with (``naspipe.lifecycle.kernels``;
    part of the run's identity, so compare runs of one kind)."""
    from naspipe.lifecycle.kernels import DEFAULT, KINDS

    p.add_argument("--kernels", type=_ruled("--kernels", str, "kernels kind", _kernels_error), default=DEFAULT,
                   metavar="KIND", help=f"CPU kernels: {', '.join(KINDS)} (default %(default)s). native: the "
                   "fastest, the same bits only on the same kind of CPU; avx2: the same bits on x86-64 CPUs of one "
                   "vendor with AVX2; portable: the same bits across vendors with sgd or momentum, within one vendor "
                   "with adam, adamw or rmsprop (docs/reproducibility.md)")


def add_ensemble_arguments(p: argparse.ArgumentParser, scored: str, run: str = "RUN") -> None:
    """``--ensemble RUN2 ...`` and ``--ensemble-last N`` of ``naspipe rank`` and ``naspipe search`` (each ``scored``
    thing, an architecture or a subnet, scored with the mean over supernets: ``naspipe.ranking.ensemble``; ``run``:
    the command's name for its run)."""
    p.add_argument("--ensemble", nargs="+", default=(), metavar="RUN2",
                   help=f"score each {scored} with the mean over {run} and these runs, equal but the seed")
    p.add_argument("--ensemble-last", type=positive_int("--ensemble-last", 2), default=None, metavar="N",
                   help=f"score each {scored} with the mean over {run}'s last N supernets: its final weights and its "
                        f"N-1 newest checkpoints (train {run} with --checkpoint-every E --keep-checkpoints N-1)")


def add_run_arguments(p: argparse.ArgumentParser, default_space: str = "naspipe-k48",
                      default_subnets: int = 1000, default_policy: str = DEFAULT_POLICY,
                      ignored: str | None = None) -> None:
    """The run arguments every run command takes. ``ignored``: why ``--stages``, ``--policy`` and ``--window``
    are accepted but have no effect (the reference), said in their help instead of what they would do."""
    p.add_argument("--space", default=default_space,
                   help="preset name, JSON file, or module:function returning a naspipe.Supernet (default %(default)s)")
    p.add_argument("--stages", type=int, default=4,
                   help=f"accepted and ignored: {ignored}" if ignored else "pipeline stages P (default %(default)s)")
    p.add_argument("--policy", default=default_policy,
                   help=f"accepted and ignored: {ignored}" if ignored else
                   f"scheduling policy: {', '.join(POLICIES)} (bsp:M sets the group size; default "
                   f"%(default)s: csp-cp with a plan chosen by simulating a fixed number of plans first, "
                   f"csp-plan:plan=S names one; csp is the paper's order); MODULE:NAME imports MODULE, which "
                   "registers policy NAME (naspipe.register_policy)")
    p.add_argument("--subnets", type=positive_int("--subnets"), default=default_subnets,
                   help="number of subnets to train (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the subnet sequence and the weights")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"accepted and ignored: {ignored}" if ignored else
                   "scheduler look-ahead window (default %(default)s)")
    p.add_argument("--sequence", default=None, help="replay the subnet sequence from this JSON file")
    p.add_argument("--shared-layers", default=DEFAULT_SHARED,
                   help=f"what the fixed blocks (a supernet's Fixed stem and head) do, one of "
                        f"{', '.join(SHARED_MODES)}: serial (trained in sequence order, exact), frozen (never "
                        "trained) or delayed:D[+predict] (trained, read D subnets late: faster pipelines); "
                        "default %(default)s: serial for your own naspipe.Supernet, frozen for the presets")
    # (commands without --sampler train the default's sequence, those without --resume start afresh: given_sampler)
    p.set_defaults(sampler=None, resume=None)


def resolved_sampler(given: str | None, *, sequence: str | None = None, resume: str | None = None) -> str:
    """``--sampler`` as ``given`` or, when not given, the run's default: ``uniform`` (the replay) with a
    ``sequence``, the sampler a ``resume``d run was trained with, ``naspipe.sequences.samplers.DEFAULT_SAMPLER``
    otherwise."""
    from naspipe.sequences.samplers import default_sampler

    if given is not None:
        return str(given)
    if resume and not sequence:
        from naspipe.runtime.checkpoint import recorded_sampler

        if (recorded := recorded_sampler(resume)) is not None:
            return recorded
    return default_sampler(bool(sequence))


def given_sampler(args: argparse.Namespace) -> str:
    """A run command's ``--sampler`` resolved (``resolved_sampler``) and written back to ``args.sampler``, so every
    reader sees the one value."""
    args.sampler = resolved_sampler(args.sampler, sequence=args.sequence, resume=args.resume)
    return args.sampler


def _seeded_sampler(args: argparse.Namespace) -> str:
    """``--sampler`` when it makes the sequence from the seed (a run-time one is the run's, not the spec's)."""
    from naspipe.sequences.samplers import parse_sampler

    text = given_sampler(args)
    spec = parse_sampler(text)
    if spec.kind != "uniform" and args.sequence:
        raise UserError(f"--sampler {text} makes the sequence; it cannot be combined with --sequence")
    return "uniform" if spec.online else str(spec)


def add_sampler_argument(p: argparse.ArgumentParser, online: bool = True) -> None:
    """``--sampler``: for ``naspipe reference``, ``train`` (also run-time ``evolution[:LAG]``), ``simulate``; its
    help lists the registered samplers (``naspipe.sequences.samplers``)."""
    from naspipe.sequences.samplers import DEFAULT_SAMPLER, sampler_help

    p.add_argument("--sampler", default=None,
                   help=sampler_help(online) + f"; default {DEFAULT_SAMPLER} (uniform with --sequence, which replays "
                        "it" + ("; a --resume keeps the run's own)" if online else ")"))


def fixed_sampler_arg(args: argparse.Namespace, needs: str, sequence: str | None = None) -> SamplerSpec:
    """The parsed ``--sampler`` of a command that needs the sequence fixed up front (plan, simulate, search; its
    default: ``resolved_sampler``, ``sequence`` the replayed file); a SamplerError (a UserError) for a bad value,
    and ``--sampler X NEEDS`` for one generated at run time."""
    from naspipe.sequences.samplers import fixed_sampler

    text = resolved_sampler(args.sampler, sequence=sequence)
    return fixed_sampler(text, needs, f"--sampler {text}")  # (a SamplerError is a UserError)


def resolve_run(args: argparse.Namespace, probe: bool = True) -> RunSpec:
    """Validate the shared run arguments into the one run description; raises a UserError with one line.

    ``probe=False``: a ``module:function`` supernet is read as plain data (labels, names, costs), no candidate
    built or run (``naspipe simulate``: those checks guard processes it never starts)."""
    for flag, value in (("--stages", args.stages), ("--window", args.window)):
        if value < 1:  # named as the user typed them (RunSpec names its own arguments)
            raise UserError(f"{flag} must be >= 1, got {value}")
    space = args.space
    if not probe:
        from pathlib import Path

        from naspipe.supernet.load import is_spec, spec_space

        if is_spec(space) and not Path(space).exists():
            space = spec_space(space, probe=False)
    try:
        spec = RunSpec.create(space, stages=args.stages, subnets=args.subnets, seed=args.seed,
                              policy=args.policy, window=args.window, shared_layers=args.shared_layers,
                              sequence=args.sequence or None, sampler=_seeded_sampler(args))
    except SequenceTooShort as e:  # named as the user typed them
        raise UserError(f"--sequence holds {e.have} subnets, fewer than --subnets {e.need}") from None
    args.policy = spec.policy  # MODULE:NAME resolved to NAME
    from naspipe.runspec.few_shot_run import from_args

    return from_args(spec, args)  # --few-shot BLOCK: the expanded space and sequence (naspipe.runspec.few_shot_run)


def add_optimizer_arguments(p: argparse.ArgumentParser) -> None:
    """``--optimizer`` and ``--lr``, shared with ``naspipe train``."""
    from naspipe.inputs.optim_names import DEFAULT_LR, OPTIMIZERS

    p.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS,
                   help="per-parameter optimizer (default %(default)s)")
    defaults = ", ".join(f"{k} {v:g}" for k, v in DEFAULT_LR.items())
    p.add_argument("--lr", type=learning_rate, default=None,
                   help=f"learning rate (default per optimizer: {defaults})")


def sampler_from_args(args: argparse.Namespace) -> SamplerSpec:
    """The parsed ``--sampler``; a UserError for a bad value or together with ``--sequence``."""
    from naspipe.sequences.samplers import parse_sampler

    spec = parse_sampler(given_sampler(args))
    if spec.kind != "uniform" and args.sequence:
        raise UserError(f"--sampler {args.sampler} generates the sequence; it cannot be combined with --sequence")
    return spec


def warn_if_diverged(losses: Mapping[int, float] | Sequence[float]) -> None:
    """One line on stderr when a training loss is NaN or infinite (a diverged run: it is kept as trained, and
    ``naspipe rank`` refuses to rank it)."""
    import math

    items = sorted(losses.items()) if isinstance(losses, Mapping) else list(enumerate(losses))
    bad = [j for j, x in items if not math.isfinite(x)]
    if bad:
        print(f"naspipe: warning: the training loss is NaN or infinite at {len(bad)} of {len(items)} subnets, first "
              f"at subnet {bad[0]}: the run diverged (a smaller --lr?); it is kept as trained", file=sys.stderr)
