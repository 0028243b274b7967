"""What a run is, declared once: the space, its partition, the subnet sequence, the shared-layer semantics,
the policy, the window and the seed, with their defaults and their one-line errors.

Why it exists: ``naspipe simulate``, ``reference``, ``train``, the torchrun entry point and the library's
``TrainConfig`` all describe a run with these seven things. They are resolved and validated here, once, from
the forms people type (a preset name, a JSON file or ``module:function``; ``bsp:8`` or ``module:name``;
``delayed:2``; a sequence file), so a default or a check cannot drift between the command line and the
library. ``naspipe.runtime.config.TrainConfig`` adds what only training needs (optimizer, device, output
folder, ...) and is built from a ``RunSpec`` (``TrainConfig.from_spec``). No torch here: the simulator's
command validates a run without importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.inputs.wholes import whole
from naspipe.sched.policies import DEFAULT_POLICY, DEFAULT_WINDOW, PolicyError
from naspipe.sched.registry import get_policy, load_policy_spec
from naspipe.sequences.fair import is_seeded
from naspipe.sequences.samplers import SamplerError, default_sampler, make_stream, parse_sampler
from naspipe.sequences.sequence import ReplayStream, SubnetStream
from naspipe.spaces.partition import Partition, split_error
from naspipe.spaces.partition import partition as make_partition
from naspipe.spaces.shared import SharedLayers, SharedPolicyError, resolve_shared
from naspipe.spaces.space import SearchSpace, SpaceError, replicas_error, resolve_space

# auto: a user's own supernet trains its fixed blocks (stem, head) exactly as the reference does (serial): frozen
# left a user's random head in place; the presets stay frozen, the paper's setting, under which CSP pipelines
# (with serial every subnet writes the stem; measured in benchmarks/shared_layers.py); naspipe.spaces.shared.default_for
DEFAULT_SHARED = "auto"
REPLICA_EXCHANGES = ("exact", "native")  # how replicas combine gradients: a fixed order, or the backend's

__all__ = ["DEFAULT_POLICY", "DEFAULT_SHARED", "DEFAULT_WINDOW", "REPLICA_EXCHANGES", "RunSpec", "RunSpecError",
           "SequenceTooShort", "check_replica_settings"]


class RunSpecError(UserError):
    """A run that cannot be described as given; its message is one line for the user."""


class SequenceTooShort(RunSpecError):
    """The replayed sequence holds fewer subnets than the run trains."""

    def __init__(self, message: str, have: int, need: int):
        super().__init__(message)
        self.have, self.need = have, need


@dataclass(frozen=True)
class RunSpec:
    """A validated run description. Build with ``RunSpec.create(...)``."""

    space: SearchSpace
    partition: Partition
    stream: SubnetStream
    shared: SharedLayers
    policy: str
    window: int
    seed: int
    sampler: str = "uniform"  # how the seed makes the sequence (naspipe.sequences.samplers); recorded with the run
    replicas: int = 1  # data-parallel replicas of every stage (each computes an equal shard of every batch)
    replica_exchange: str = "exact"  # how the replicas combine their gradients (REPLICA_EXCHANGES)

    @property
    def replayed(self) -> bool:
        """The sequence was given (a file, a stream or a list), not sampled from the seed."""
        if self.sampler != "uniform" and not parse_sampler(self.sampler).online:
            return False  # another seeded sampler made the stream (one registered by a user too)
        return not is_seeded(self.stream)

    @property
    def stages(self) -> int:
        return self.partition.stages

    @property
    def subnets(self) -> int:
        return len(self.stream)

    @classmethod
    def of(cls, space: SearchSpace, partition: Partition, stream: SubnetStream, policy: str = DEFAULT_POLICY, *,
           window: int = DEFAULT_WINDOW, shared: SharedLayers | None = None, seed: int = 0, replicas: int = 1,
           replica_exchange: str = "exact") -> RunSpec:
        """A run of parts already built (a space, its partition, a stream): nothing resolved or checked beyond
        what the simulator and the schedulers check themselves (``create`` resolves and validates)."""
        return cls(space, partition, stream, shared or SharedLayers(), policy, window, seed, replicas=replicas,
                   replica_exchange=replica_exchange)

    @classmethod
    def create(cls, space: SearchSpace | str, *, stages: int = 1, subnets: int = 100, seed: int = 0,
               policy: str = DEFAULT_POLICY, window: int = DEFAULT_WINDOW,
               shared_layers: SharedLayers | str = DEFAULT_SHARED, sequence: Any = None,
               partition: Partition | None = None, sampler: str | None = None, replicas: int = 1,
               replica_exchange: str = "exact") -> RunSpec:
        """Resolve and validate; raises ``RunSpecError`` (one line).

        ``space``: a ``SearchSpace``, a preset name, a JSON file or ``module:function``. ``policy``: a
        registered policy string or ``MODULE:NAME`` (MODULE registers NAME). ``sequence``: None (the sampler's
        sequence keyed by ``seed``), a sequence file, or a stream / list of subnets; its first ``subnets`` are
        trained. ``partition`` overrides ``stages`` (default: cost-balanced contiguous stages). ``sampler``:
        ``uniform``, ``fair`` or ``spread[:BASE]`` make the sequence from the seed (``naspipe.sequences.samplers``); a
        run-time sampler (``evolution:LAG``) is generated by the run (the stream here is then a placeholder).
        ``replicas``: data-parallel replicas of every stage (``naspipe.spaces.space.replicas_error`` says which can
        split the batch);
        Without ``sampler``: ``naspipe.sequences.samplers.default_sampler`` (``fair``; ``uniform``, the replay, with a
        ``sequence``).
        ``replica_exchange``: ``exact`` (a fixed summation order, bit-identical to one device) or ``native`` (the
        backend's all-reduce).
        """
        try:
            sp = resolve_space(space)
        except SpaceError as e:
            raise RunSpecError(str(e)) from None
        stages, subnets = whole("stages", stages, 1, RunSpecError), whole("subnets", subnets, 1, RunSpecError)
        window = whole("window", window, 1, RunSpecError, " (the subnets the scheduler looks ahead)")
        seed = whole("seed", seed, None, RunSpecError)  # (numpy integers too)
        try:  # MODULE:NAME imports a user's module that registers NAME (naspipe.register_policy)
            policy = load_policy_spec(policy)
            get_policy(policy)
        except PolicyError as e:
            raise RunSpecError(str(e)) from None
        try:
            part = partition if partition is not None else make_partition(sp, stages)
            if (why := split_error(part, sp)) is not None:
                raise RunSpecError(why)
            shared = resolve_shared(shared_layers, sp)
            spec = parse_sampler(default_sampler(sequence is not None) if sampler is None else sampler)
            stream = _stream(sp, seed, subnets, sequence, str(spec) if not spec.online else "uniform")
        except SamplerError as e:
            raise RunSpecError(str(e)) from None
        except (SpaceError, SharedPolicyError, PolicyError) as e:
            raise RunSpecError(str(e)) from None
        check_replica_settings(sp, replicas, replica_exchange)
        return cls(sp, part, stream, shared, policy, window, seed, str(spec), replicas, replica_exchange)


def check_replica_settings(space: SearchSpace, replicas: object, exchange: str = "exact") -> None:
    """RunSpecError (one line) for replicas that cannot train ``space`` or an unknown gradient exchange."""
    if (why := replicas_error(space.batch_size, replicas)) is not None:
        raise RunSpecError(f"{why}; space {space.name!r}")
    if exchange not in REPLICA_EXCHANGES:
        raise RunSpecError(f"unknown replica exchange {exchange!r}; choose one of {', '.join(REPLICA_EXCHANGES)}")
    if replicas == 1 and exchange != "exact":
        raise RunSpecError("replica exchange native only applies with replicas > 1")


def _stream(space: SearchSpace, seed: int, subnets: int, sequence: Any, sampler: str) -> SubnetStream:
    if sequence is None:
        return make_stream(space, seed, subnets, sampler)
    if sampler != "uniform":
        raise RunSpecError(f"sampler {sampler} makes the sequence from the seed; it cannot be combined with a "
                           "given sequence")
    if isinstance(sequence, (str, Path)):
        given = ReplayStream.from_file(space, sequence)
    elif hasattr(sequence, "__len__") and hasattr(sequence, "__getitem__") and not isinstance(sequence, Mapping):
        given = sequence
    else:
        raise RunSpecError(f"sequence must be a file, a subnet stream or a list of subnets, got "
                           f"{type(sequence).__name__}")
    if len(given) < subnets:
        where = f" ({sequence})" if isinstance(sequence, (str, Path)) else ""
        raise SequenceTooShort(f"the sequence{where} holds {len(given)} subnets, fewer than the {subnets} to train",
                               len(given), subnets)
    try:
        return ReplayStream(space, [given[j] for j in range(subnets)])
    except TypeError:  # a list of numbers, bytes: subnets that are not lists of choices
        raise RunSpecError("sequence: its subnets must be lists of choices or {label: candidate} objects, got "
                           f"{given[0]!r:.40} first") from None
