"""Corrections for asynchronous pipelines and the weight-version bookkeeping of the baselines.

One idea per module:

* ``stashing``  weight versions per stage (async, stash, 2bw, gpipe) and *measured* forward/backward lags
* ``delay``     stability of delayed SGD on a quadratic (the O(1/tau) law; the harmful-discrepancy model)
* ``pipemare``  PipeMare T1 (learning-rate rescheduling), T2 (discrepancy correction), synchronous warm-up
* ``pipeoptim`` PipeOptim weight prediction before the forward, per optimizer

* ``toy``       a least-squares model trained by a simulated asynchronous 1F1B pipeline (the test bench)

``stashing`` and ``delay`` import no torch; ``pipemare`` and ``pipeoptim`` do and are loaded on first use.

How the runtime uses them (``naspipe.runtime.update_rules.async_rules``, one optimizer bank per stage): the update rules
keep their own weight versions (``TwoBWUpdates``, ``naspipe.runtime.update_rules.versions.FixedVersions``) and call
``two_bw_delay``, ``DiscrepancyCorrector`` (T2: ``with corr.observe_step():`` around the step, the backward
inside ``with corr.corrected_weights():``), ``rescheduled_lr`` (T1), ``predicted_weights`` and
``version_gap`` (PipeOptim) directly. The runtime does not use ``VersionStore``: it is the bookkeeping model
of version reads and measured lags for the toy pipeline (``toy``) and the tests, and ``SyncWarmup`` the
warm-up rule the runtime implements with its ``warmup`` option.

Shared layers ``delayed(D)``: subnet ``j`` reads version ``v_{j-D}``, applied ``D`` updates before its own:
predict with ``s = D`` and rescale with ``tau = D``. For bit-reproducible runs the prediction is computed when
the version is snapshotted (from the optimizer state at that update), never at forward time
(``naspipe.runtime.update_rules.updates.CorrectedFixedVersions``, ``naspipe.oracle.sequential_trainer``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from naspipe.corrections.delay import (
    bisect_stable,
    is_stable,
    largest_stable_step,
    root_stable_step,
    simulate_delayed,
    theory_stable_step,
)
from naspipe.corrections.stashing import (
    STASH_POLICIES,
    ScheduledTask,
    StageLags,
    VersionStore,
    measure_lags,
    pipeline_schedule,
    replay_lags,
    stage_orders,
    theoretical_lag,
    two_bw_delay,
)

_LAZY = {
    "DiscrepancyCorrector": "pipemare", "SyncWarmup": "pipemare", "discrepancy_gamma": "pipemare",
    "one_f_one_b_delays": "pipemare", "rescheduled_lr": "pipemare", "t1_learning_rate": "pipemare",
    "t1_multiplier": "pipemare",
    "needs_last_grad": "pipeoptim", "predict": "pipeoptim", "predicted_weights": "pipeoptim",
    "prediction_direction": "pipeoptim", "remember_grads": "pipeoptim", "version_gap": "pipeoptim",
}

__all__ = [
    "STASH_POLICIES", "ScheduledTask", "StageLags", "VersionStore", "bisect_stable", "is_stable", "largest_stable_step",
    "measure_lags", "pipeline_schedule", "replay_lags", "root_stable_step", "simulate_delayed", "stage_orders",
    "theoretical_lag", "theory_stable_step", "two_bw_delay", *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"naspipe.corrections.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'naspipe.corrections' has no attribute {name!r}")
