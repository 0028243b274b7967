"""The runtime: real supernet training, one OS process per pipeline stage, on torch.distributed.

The same ``StageScheduler`` objects the simulator drives decide what each stage runs. The package is grouped
by job:

* ``processes``: the launcher (one machine; ``naspipe.torchrun`` under torchrun), the stage worker's event loop,
  signals, the trace recorder;
* ``transport``: activations and gradients between neighbours, the replicas' gradient exchange, ports and the
  torchrun ranks' meeting;
* ``update_rules``: when and how gradients become weight updates (one protocol; the asynchronous baselines);
* ``layer_cache``: context switching (candidates in host memory, a budgeted device working set);
* ``split_backward``: ``csp-bw``'s input-gradient ``B`` and per-layer weight-gradient ``W``;
* at the top: ``config`` (``TrainConfig``), ``preparation`` (a run's one ``prepare``), ``stagerun`` (one
  stage's place in the run, ``StageRun``), ``stage_exec`` (a stage's tasks on its ``StageModel``), ``checkpoint``,
  ``rundir``, ``outputs`` and ``replay`` (one process, a simulated order).

Library API::

    from naspipe.runtime import TrainConfig, train
    result = train(TrainConfig.create("tiny-transformer", "runs/csp2", stages=2, subnets=50, policy="csp"))
    result.metrics["subnets_per_s"], result.verify("runs/reference")

Importing this package does not import torch; ``train`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from naspipe.runtime.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from naspipe.runtime.outputs import RunResult


def train(config: TrainConfig | Any = None, /, **kwargs: Any) -> RunResult:
    """Train ``config`` (or ``TrainConfig.create(**kwargs)``) and return the merged ``RunResult``.

    ``train(supernet, out=...)`` is ``train(space=supernet, out=...)``: a first argument that is not a
    ``TrainConfig`` is the space (a Supernet, a SearchSpace, a preset name or ``module:function``).

    Raises ``ConfigError`` for a bad configuration (before any process starts) and
    ``naspipe.runtime.processes.launcher.TrainError`` when a stage fails (naming the rank).
    """
    from naspipe.runtime.processes.launcher import train as _train

    if config is None:
        config = TrainConfig.create(**kwargs)
    elif not isinstance(config, TrainConfig):  # train(supernet, out=...): the space, given positionally
        if "space" in kwargs:
            raise TypeError(f"train() got the space twice: a positional {type(config).__name__} and space=; pass "
                            "one TrainConfig, or keyword arguments (space=..., out=..., ...)")
        config = TrainConfig.create(space=config, **kwargs)
    elif kwargs:
        raise TypeError(f"pass either a TrainConfig or keyword arguments, not both (got a TrainConfig and "
                        f"{', '.join(sorted(kwargs))}=; use config.replace(...) to change it)")
    from naspipe.runtime.preparation import prepare

    config = prepare(config)  # once: refused before anything is said (create prepared it; replace did not)
    if config.progress:  # with its bar: what the fixed blocks do, in one line (naspipe train says it too)
        from naspipe.lifecycle import kernels
        from naspipe.spaces.shared import announce

        announce(config.space, config.shared, "shared_layers=")
        kernels.announce(config.kernels, config.optimizer)
    return _train(config)


def __getattr__(name: str) -> Any:
    if name == "RunResult":
        from naspipe.runtime.outputs import RunResult

        return RunResult
    if name == "TrainError":
        from naspipe.runtime.processes.launcher import TrainError

        return TrainError
    raise AttributeError(name)


__all__ = ["ConfigError", "RunResult", "TrainConfig", "TrainError", "train"]
