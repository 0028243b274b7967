"""naspipe: reproducible pipeline-parallel supernet training with causal synchronous parallelism (CSP).

The small public API. The scheduling core (``naspipe.sched``), the simulator (``naspipe.sim``), spaces,
sequences, partitions and traces never import torch; the runtime and models do, and are imported lazily.
"""

import os
from typing import Any

from naspipe.preflight.measure import measure_costs
from naspipe.runspec.spec import RunSpec, RunSpecError
from naspipe.runtime import TrainConfig, train
from naspipe.sched import CSPScheduler, SharedLayers, make_scheduler, parse_shared, policy_names
from naspipe.sched.registry import Policy, get_policy, register_policy
from naspipe.sched.trace import Trace, TraceEvent
from naspipe.sequences.conflicts import conflict_stats
from naspipe.sequences.fair import FairStream, SpreadStream
from naspipe.sequences.samplers import make_stream
from naspipe.sequences.sequence import ReplayStream, UniformStream, Window
from naspipe.sim import SimOptions, simulate
from naspipe.sim.bound import Bound, lower_bound
from naspipe.spaces.partition import Partition, partition
from naspipe.spaces.space import (
    Block,
    Candidate,
    SearchSpace,
    SpaceError,
    load_space,
    preset,
    preset_names,
    resolve_space,
)
from naspipe.supernet import Choice, Fixed, Supernet, SupernetError, subnet_dict, subnet_tuple

__version__ = "0.1.0"


def rank(run: str | os.PathLike, truth: Any, **kw: Any) -> Any:
    """A ``RankReport``: how well the supernet trained in ``run`` ranks a ground truth
    (``naspipe.ranking.compare.rank``; ``naspipe rank`` prints it)."""
    from naspipe.ranking.compare import rank as _rank

    return _rank(run, truth, **kw)


def write_reference(space: Any, out: str | os.PathLike, *, subnets: int = 100, seed: int = 0,
              shared_layers: str | SharedLayers | None = None, optimizer: str = "sgd", **options: Any) -> Any:
    """Write the sequential reference run of ``space`` to ``out`` as ``naspipe reference`` does (same checks,
    files and ``run.json``), so ``naspipe verify RUN OUT`` compares a run trained with ``naspipe.train`` with it.

    The defaults are ``naspipe.train``'s (100 subnets, seed 0, the default shared layers, sgd); ``options``:
    ``lr``, ``threads``, ``replicas``, ``sequence``, ``sampler``, ``overwrite``, ``progress``. Returns the folder
    (a ``pathlib.Path``); raises ``RunSpecError`` (one line) for what the command refuses with exit code 2."""
    from naspipe.cli.cmd_reference import write
    from naspipe.runspec.spec import DEFAULT_SHARED

    return write(space, out, subnets=subnets, seed=seed, optimizer=optimizer,
                 shared_layers=DEFAULT_SHARED if shared_layers is None else shared_layers, **options)


# ``naspipe.reference(...)`` is a plain function; the trainer lives in ``naspipe.oracle.sequential_trainer``
reference = write_reference


__all__ = [
    "Choice", "Fixed", "measure_costs", "Supernet", "SupernetError", "subnet_dict", "subnet_tuple",
    "Block", "Bound", "Candidate", "Partition", "ReplayStream", "SearchSpace", "SharedLayers", "SpaceError", "Trace",
    "TraceEvent", "UniformStream", "Window", "load_space", "lower_bound", "make_scheduler", "parse_shared",
    "partition", "Policy", "get_policy", "register_policy", "policy_names", "preset", "preset_names",
    "rank", "reference", "write_reference", "resolve_space", "RunSpec", "RunSpecError", "SimOptions", "simulate",
    "TrainConfig", "train", "conflict_stats", "FairStream", "make_stream", "SpreadStream", "CSPScheduler",
]
