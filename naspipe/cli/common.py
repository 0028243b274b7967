"""Arguments shared by several subcommands, and their validation into library objects."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from naspipe.partition import Partition, partition
from naspipe.sched.policies import DEFAULT_POLICY, POLICIES, PolicyError
from naspipe.sched.registry import get_policy, load_policy_spec
from naspipe.sequence import ReplayStream, SubnetStream, UniformStream
from naspipe.shared import SharedLayers, SharedPolicyError, parse_shared
from naspipe.space import SearchSpace, SpaceError, resolve_space


class UsageError(Exception):
    """Bad user input: reported as one line with exit code 2."""


def positive_int(name: str, minimum: int = 1):  # noqa: ANN201
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {v}")
        return v
    return parse


def non_negative_float(name: str):  # noqa: ANN201
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not v >= 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number >= 0, got {text}")
        return v
    return parse


def positive_float(name: str, unit: str = ""):  # noqa: ANN201
    """An argparse type for a finite number > 0 (``unit``, e.g. "seconds", names what it counts)."""
    what = f"number of {unit}" if unit else "number"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a {what}, got {text!r}") from None
        if not 0 < v < float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be a finite {what} > 0, got {text}")
        return v
    return parse


def add_run_arguments(p: argparse.ArgumentParser, default_space: str = "naspipe-k48",
                      default_subnets: int = 1000, default_policy: str = DEFAULT_POLICY) -> None:
    p.add_argument("--space", default=default_space,
                   help="preset name, JSON file, or module:function returning a naspipe.Supernet (default %(default)s)")
    p.add_argument("--stages", type=int, default=4, help="pipeline stages P (default %(default)s)")
    p.add_argument("--policy", default=default_policy,
                   help=f"scheduling policy: {', '.join(POLICIES)} (bsp:M sets the group size; default "
                        f"%(default)s, csp is the paper's order); MODULE:NAME imports MODULE, which registers "
                        "policy NAME (naspipe.register_policy)")
    p.add_argument("--subnets", type=positive_int("--subnets"), default=default_subnets,
                   help="number of subnets to train (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the subnet sequence and the weights")
    p.add_argument("--window", type=int, default=200, help="scheduler look-ahead window (default %(default)s)")
    p.add_argument("--sequence", default=None, help="replay the subnet sequence from this JSON file")
    p.add_argument("--shared-layers", default="frozen",
                   help="fixed-block semantics: frozen, serial or delayed:D (default %(default)s)")


@dataclass
class RunConfig:
    space: SearchSpace
    partition: Partition
    stream: SubnetStream
    shared: SharedLayers
    policy: str
    window: int
    seed: int


def resolve_run(args: argparse.Namespace) -> RunConfig:
    """Validate the shared run arguments; raises UsageError with one clear line."""
    try:
        space = resolve_space(args.space)
    except SpaceError as e:
        raise UsageError(str(e)) from None
    if args.stages < 1:
        raise UsageError(f"--stages must be >= 1, got {args.stages}")
    if args.window < 1:
        raise UsageError(f"--window must be >= 1, got {args.window}")
    try:  # MODULE:NAME imports a user's module that registers NAME (naspipe.register_policy)
        args.policy = load_policy_spec(args.policy)
        get_policy(args.policy)
    except PolicyError as e:
        raise UsageError(str(e)) from None
    try:
        part = partition(space, args.stages)
        shared = parse_shared(args.shared_layers)
    except (SpaceError, SharedPolicyError, PolicyError) as e:
        raise UsageError(str(e)) from None
    try:
        if args.sequence:
            stream: SubnetStream = ReplayStream.from_file(space, args.sequence)
            if len(stream) < args.subnets:
                raise UsageError(f"--sequence holds {len(stream)} subnets, fewer than --subnets {args.subnets}")
            stream = ReplayStream(space, [stream[j] for j in range(args.subnets)])
        else:
            stream = UniformStream(space, args.seed, args.subnets)
    except SpaceError as e:
        raise UsageError(str(e)) from None
    return RunConfig(space, part, stream, shared, args.policy, args.window, args.seed)
