"""A run description made few-shot: the expanded space and the remapped subnet sequence, checked before any process.

Why it exists: ``naspipe train`` and ``naspipe reference`` (and ``naspipe.train``, ``naspipe.reference``,
``TrainConfig.create``) describe a run as a ``naspipe.runspec.spec.RunSpec`` of the base space; ``few_shot_run``
replaces its space by the expanded one (``naspipe.spaces.few_shot``) and its sequence by the expanded
subnets (a ``ReplayStream``: subnet ``j`` keeps its architecture, on copy 0 before the warm-up's end and on its own
sub-supernet's copy after it). Everything downstream (partition, schedulers, CSP's conflicts, checkpoints,
``verify``) then sees an ordinary run. ``train_error`` says what the pipeline cannot combine with the warm start
(it needs a scheduler fence at the boundary). Refusals are one line (``RunSpecError``, exit code 2).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from naspipe.runspec.spec import RunSpec, RunSpecError
from naspipe.sequences.samplers import SamplerError, parse_sampler
from naspipe.sequences.sequence import ReplayStream
from naspipe.spaces.few_shot import FewShotError, few_shot_of, few_shot_space

__all__ = ["add_few_shot_arguments", "train_error", "few_shot_run", "from_args"]


def _warmup(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--few-shot-warmup must be a whole number of subnets, got {text!r}") \
            from None


def add_few_shot_arguments(p: argparse.ArgumentParser) -> None:
    """``--few-shot BLOCK`` and ``--few-shot-warmup W`` (``naspipe train``, ``naspipe reference``)."""
    p.add_argument("--few-shot", default=None, metavar="BLOCK",
                   help="few-shot supernet: split on choice block BLOCK (name or index): every other choice block "
                        "holds one copy of each candidate per BLOCK candidate, and an architecture trains and is "
                        "scored on the copy its BLOCK choice names; fixed blocks stay shared (docs/few-shot.md)")
    p.add_argument("--few-shot-warmup", type=_warmup, default=None, metavar="W",
                   help="with --few-shot: the first W subnets (counted in --subnets) train the one-shot supernet "
                        "(copy 0); then every copy starts from copy 0's weights and optimizer state "
                        "(default: half of --subnets)")


def few_shot_run(spec: RunSpec, few_shot: str | int | None = None, few_shot_warmup: int | None = None,
                 sampler: str = "uniform") -> RunSpec:
    """``spec`` (a run of its base space) split on block ``few_shot`` after ``few_shot_warmup`` subnets (default
    half of them); ``spec`` itself when ``few_shot`` is None. ``sampler``: the run's sampler, refused when it
    generates the sequence at run time. RunSpecError (one line) for a split that cannot be made."""
    if few_shot is None:
        if few_shot_warmup is not None:
            raise RunSpecError("--few-shot-warmup needs --few-shot BLOCK (the choice block to split on)")
        return spec
    try:
        online = parse_sampler(str(sampler)).online
    except SamplerError as e:
        raise RunSpecError(str(e)) from None
    if online:
        raise RunSpecError(f"--few-shot needs a sequence known up front; --sampler {sampler} generates it at run time")
    n = spec.subnets
    warmup = n // 2 if few_shot_warmup is None else few_shot_warmup
    try:
        space = few_shot_space(spec.space, few_shot, warmup, n)
    except FewShotError as e:
        raise RunSpecError(str(e)) from None
    stream = ReplayStream(space, [space.expand(j, spec.stream[j]) for j in range(n)], valid=True)
    return dataclasses.replace(spec, space=space, stream=stream)


def from_args(spec: RunSpec, args: argparse.Namespace) -> RunSpec:
    """``few_shot_run`` of the command's ``--few-shot``, ``--few-shot-warmup`` and ``--sampler`` (commands without
    them: ``spec`` as it is)."""
    return few_shot_run(spec, getattr(args, "few_shot", None), getattr(args, "few_shot_warmup", None),
                        getattr(args, "sampler", None) or "uniform")


def train_error(cfg: Any) -> str | None:
    """Why a few-shot training run (a ``TrainConfig``) cannot start (None: it can, or it is no few-shot run): every
    stage copies at a scheduler fence at the warm-up's end, so the policy must support fences (checkpoints) and keep
    no weight versions the copy would miss (the asynchronous baselines do); with groups of micro-batches the
    boundary must fall between groups; context switching is not supported."""
    from naspipe.sched.baselines import group_resume_error

    fs = few_shot_of(cfg.space)
    if fs is None:
        return None
    if cfg.online:
        return f"few-shot needs a sequence known up front; sampler {cfg.sampler} generates it at run time"
    pol = cfg.policy_spec
    if not pol.checkpoints or pol.updates not in ("exact", "group"):  # (stashed and async rules hold weight versions)
        return (f"few-shot trains with the policies whose stages hold no weight versions and can be fenced at the "
                f"warm start (subnet {fs.warmup}): the exact ones (csp, csp-plan, ...) and bsp, not "
                f"{cfg.policy_name}")
    if cfg.device_memory is not None:
        return "few-shot cannot be combined with device_memory (context switching) yet"
    m = cfg._micro_batches()
    if m and fs.warmup and (why := group_resume_error(fs.warmup, m)) is not None:
        return f"few-shot warm-up {fs.warmup}: {why}"
    return None
