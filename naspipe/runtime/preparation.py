"""The one preparation of a training run: what must be built, probed or read before any process starts, done once.

Why it exists: a ``TrainConfig`` (``naspipe.runtime.config``) checks its own fields whenever it is made or
changed: names, ranges, the policy's options against its declaration; nothing is built there, so ``replace``
stays cheap. What costs more is done here, in one step, once per run: the space must have a torch model and
travel to the stage processes, CUDA must be there when asked for, a memory budget must hold each stage's
candidates (the stage models are built), the model is probed block by block (``check_model_of``), ``csp-plan``'s
plan is chosen (``TrainConfig.planned``), and a resumed run takes its checkpoint's position
(``naspipe.runtime.checkpoint.apply_resume``). ``prepare`` returns the config marked ``prepared``; every way into a
run goes through it (``TrainConfig.create`` and ``from_spec``, hence ``naspipe train``, the torchrun entry point,
``naspipe.train``, the demo), and the launcher prepares only a config that is not prepared yet (one changed
with ``replace`` since).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from naspipe.runtime.rundir import ConfigError

if TYPE_CHECKING:
    from naspipe.runtime.config import TrainConfig


def prepare(cfg: TrainConfig, resume: str | Path | None = None) -> TrainConfig:
    """``cfg`` ready to run, marked ``prepared``: trainable (a torch model that can travel, the device there), its
    memory budget holding, its model probed, its plan chosen and, with ``resume`` (a run directory or checkpoint
    folder), continuing from that run's newest complete checkpoint. A config already prepared is returned as it
    is (unless ``resume`` is given). ConfigError (one line) for a run that cannot start."""
    if cfg.prepared and resume is None:
        return cfg
    from naspipe.sim.plan_choice import needs_plan

    check_trainable(cfg)
    from naspipe.runspec.few_shot_run import train_error

    if (why := train_error(cfg)) is not None:  # a few-shot run's warm start needs a fence (docs/few-shot.md)
        raise ConfigError(why)
    check_memory_budget(cfg)
    check_model_of(cfg)
    chosen_here = needs_plan(cfg.policy)  # plain csp-plan: the plan follows from today's costs
    cfg = cfg.planned()
    if resume is not None:
        from naspipe.runtime.checkpoint import apply_resume

        cfg = apply_resume(cfg, resume, adopt_plan=chosen_here)  # a resume continues the checkpoint's plan
    return cfg.replace(prepared=True)


def check_trainable(cfg: TrainConfig) -> None:
    """The space has a torch model, a notebook-defined supernet pickles, and CUDA is there when asked for."""
    from naspipe.models import model_kind  # torch, but no process

    try:
        model_kind(cfg.space)
    except ValueError as e:
        raise ConfigError(f"{e}; cost-only spaces (naspipe-kK, unit-kK) can only be simulated") from None
    from naspipe.spaces.space import SpaceError
    from naspipe.supernet.load import check_shippable  # a notebook-defined supernet must pickle

    try:
        check_shippable(cfg.space)
    except SpaceError as e:
        raise ConfigError(str(e)) from None
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device cuda was asked for, but torch sees no CUDA device; use --device cpu")


def check_memory_budget(cfg: TrainConfig) -> None:
    """With ``device_memory`` (context switching): each stage's budget holds what its swap mode keeps (the
    stage models are built to count their bytes)."""
    if cfg.device_memory is None:
        return
    from naspipe.models import build_stage
    from naspipe.runtime.layer_cache.switching import resident_bytes, stage_budget

    for s in range(cfg.stages):
        model = build_stage(cfg.space, cfg.partition.blocks(s), cfg.seed, cfg.shared)
        budget, share, need = stage_budget(cfg.device_memory, model, cfg.optimizer)
        if cfg.swap == "resident" and budget < resident_bytes(model, cfg.optimizer):
            raise ConfigError(f"device memory {cfg.device_memory} gives stage {s} {budget} bytes, less than its "
                              f"whole supernet share with {cfg.optimizer} state "
                              f"({resident_bytes(model, cfg.optimizer)} bytes) that --swap resident keeps; "
                              "use a larger budget or a swapping mode")
        if share and budget < need:
            raise ConfigError(f"device memory {cfg.device_memory} gives stage {s} {budget} bytes, less than "
                              f"one subnet's candidates there need ({need} bytes with {cfg.optimizer} state; "
                              f"the stage's supernet share is {share} bytes)")


def check_model_of(cfg: TrainConfig) -> None:
    """Build the run's model block by block and run every candidate on a probe batch (``naspipe.preflight.modelcheck``);
    ConfigError naming the block and candidate when it cannot be built or run."""
    from naspipe.preflight.modelcheck import ModelCheckError, check_messages, check_model, probe_replica_shards

    try:
        check_model(cfg.space, cfg.seed, cfg.shared)
    except ModelCheckError as e:
        raise ConfigError(str(e)) from None
    from naspipe.runtime.transport.comm import DTYPES

    try:
        probe_replica_shards(cfg.space, cfg.replicas)  # a user supernet's shard of B/R samples runs
        check_messages(cfg.space, [b - 1 for _, b in cfg.partition.bounds[:-1]], DTYPES, cfg.seed, cfg.shared)
    except ModelCheckError as e:
        raise ConfigError(str(e)) from None
