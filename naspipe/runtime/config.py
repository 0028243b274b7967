"""The run configuration of a training job: a frozen record whose fields are checked whenever it is made.

Why it exists: the CLI, the torchrun entry point and notebooks all describe a run the same way — the run
itself (space, partition, sequence, shared layers, policy, window, seed) as a ``naspipe.runspec.spec.RunSpec``,
and here what only training adds (optimizer, device, threads, output folder, replicas, checkpoints) — and a
bad run must be refused with one clear line before a single worker is spawned (``ConfigError``, which the
CLI turns into exit code 2). A ``TrainConfig`` holds only plain, picklable data: it is what every stage
process receives. Making one (or ``replace``) checks its fields cheaply: names, ranges, the policy's options
against its declaration (``naspipe.sched.registry.policy_settings``), nothing built. What builds or reads more
(the model probes, a memory budget's stage models, the plan, a resume) is ``naspipe.runtime.preparation``'s one
step, which ``create`` and ``from_spec`` take; ``measured_partition`` lives here; output folders are
``naspipe.runtime.rundir``'s, ports ``naspipe.runtime.transport.ports``'.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naspipe.inputs.optim_names import OPTIMIZERS, lr_error
from naspipe.inputs.paths import out_name_error
from naspipe.lifecycle import kernels
from naspipe.lifecycle.kernels import DEFAULT as DEFAULT_KERNELS
from naspipe.runfolder import runs
from naspipe.runspec.few_shot_run import few_shot_run
from naspipe.runspec.spec import (
    DEFAULT_POLICY,
    DEFAULT_SHARED,
    DEFAULT_WINDOW,
    RunSpec,
    RunSpecError,
    check_replica_settings,
)
from naspipe.runtime.rundir import ConfigError, check_out_dir, prepare_out_dir  # noqa: F401
from naspipe.sched.baselines import group_resume_error
from naspipe.sched.policies import PolicyError
from naspipe.sched.registry import Policy, get_policy, micro_batches_of, policy_names
from naspipe.sequences.samplers import SamplerError, SamplerSpec, make_stream, parse_sampler
from naspipe.sequences.sequence import ReplayStream, SubnetStream
from naspipe.spaces.partition import Partition, split_error
from naspipe.spaces.partition import partition as make_partition
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, Subnet

DEVICES = ("cpu", "cuda")
START_METHODS = ("forkserver", "spawn")
BALANCES = ("cost", "measured")
FAULT_ACTIONS = ("raise", "kill", "exit", "hang")
# policies whose writes can be ordered by subnet across a stage's replicas (naspipe.runtime.transport.replica_group)


def _parsed_sampler(sampler: Any) -> SamplerSpec:
    try:
        return parse_sampler(str(sampler))
    except SamplerError as e:
        raise ConfigError(str(e)) from None


def _with_sampler(spec: RunSpec, parsed: SamplerSpec) -> RunSpec:
    """``spec`` with the sequence of a seeded sampler (fair, spread) when it was built with another one."""
    if parsed.online or str(parsed) == spec.sampler:
        return spec
    if spec.replayed:
        raise ConfigError(f"sampler {parsed} makes the sequence from the seed; it cannot be combined with sequence")
    return dataclasses.replace(spec, stream=make_stream(spec.space, spec.seed, spec.subnets, parsed),
                               sampler=str(parsed))


MAX_THREADS = 1024  # thousands of intra-op threads fail to start in a stage, one run after 102 s (--threads 5000)


def threads_error(threads: object) -> str | None:
    """Why ``threads`` cannot be a stage's intra-op thread count (None: it can): a whole number from 1 to
    ``MAX_THREADS``. Not bound to this machine's cores: a run is resumed, and verified against a reference, with
    the thread count it was made with (another one changes the bits), maybe on a smaller machine."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        return f"must be a whole number from 1 to {MAX_THREADS}, got {threads!r}"
    return None


def replica_policies() -> list[str]:
    """The policies that train with data-parallel replicas (declared ``replicas=True``)."""
    return [n for n in policy_names() if get_policy(n).replicas]
# files that mark a directory as holding a run (refused unless overwrite=True)
RUN_FILES = runs.RUN_FILES


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs. Build with ``TrainConfig.create(...)``, which checks and prepares it.

    Its fields are checked whenever one is made (``replace`` too: cheap, nothing built); ``prepared`` says that
    ``naspipe.runtime.preparation.prepare`` has run on it (model probed, plan chosen, resume applied): a
    ``replace`` drops it, and the launcher prepares a config that is not prepared.

    ``fault`` injects a failure for tests of the supervision: ``ACTION:STAGE:SUBNET`` with ACTION one of
    raise, kill (SIGKILL itself), exit (``os._exit(3)``) or hang; it fires when that stage starts a task
    of that subnet.
    """

    space: SearchSpace
    out: Path
    partition: Partition
    sequence: tuple[Subnet, ...]  # the subnets to train, in order
    seed: int = 0
    policy: str = DEFAULT_POLICY
    shared: SharedLayers = field(default_factory=SharedLayers)
    window: int = DEFAULT_WINDOW
    optimizer: str = "sgd"
    lr: float | None = None  # None: the optimizer's default (naspipe.models.DEFAULT_LR)
    jitter_ms: float = 0.0
    threads: int = 1
    # which CPU kernels every stage computes with (naspipe.lifecycle.kernels): part of the run's bits
    kernels: str = DEFAULT_KERNELS
    device: str = "cpu"
    timeout: float = 120.0
    micro_batches: int | None = None
    max_pending_w: int | None = None
    port: int | None = None
    overwrite: bool = False
    progress: bool = True
    # every stage writes its trained candidates to ``weights-stage<s>.pt`` (what ``naspipe search`` reads); a run
    # whose weights nothing reads (the demo, the quickstart) saves the disk: sparse-mlp's are 113 MB a stage
    save_weights: bool = True
    checkpoint_every: int | None = None  # save every stage at subnets N, 2N, ... (naspipe.runtime.checkpoint)
    # how many complete checkpoints the run keeps, the newest (older ones are deleted): 1 keeps the newest only;
    # more keep the last supernets for ``naspipe rank --ensemble-last``. It changes no number of the run
    keep_checkpoints: int = 1
    resume: str | None = None  # the checkpoint position directory this run continues from
    start: int = 0  # subnets < start are done (restored from ``resume``)
    # the digest of what the supernet computes (``naspipe.preflight.behaviour``), taken by the launcher in a process
    # forked from the run's fork server before any stage starts; None until then (not compared where absent)
    behaviour_sha256: str | None = None
    fault: str | None = None
    start_method: str = "forkserver"
    balance: str = "cost"  # how the partition was chosen (recorded only): "cost" model or "measured"
    # the subnet sequence generated at run time from the losses (``naspipe.sequences.samplers``): "uniform" trains
    # ``sequence``; "evolution:LAG" leaves ``sequence`` empty and trains ``subnet_count`` generated subnets
    sampler: str = "uniform"
    subnet_count: int | None = None
    # context switching (``naspipe.runtime.layer_cache.switching``): None keeps every candidate resident (the default);
    # a size (``2GiB``) or a share of the stage's candidate parameters (``25%``) per stage
    device_memory: str | None = None
    swap: str = "predictive"  # predictive | on-demand | resident (only with device_memory)
    prefetch_depth: int = 4
    pin: str = "subnet"  # subnet | task: how long a candidate stays pinned (only with device_memory)
    # data-parallel replicas of every stage (world size = stages x replicas; naspipe.models.shards)
    replicas: int = 1
    # how replicas combine gradients: "exact" (gathered, summed in replica order: equals the reference) or
    # "native" (the backend's all-reduce: reproducible run to run, not comparable with the reference)
    replica_exchange: str = "exact"
    # naspipe.runtime.preparation.prepare ran on this config (not part of what the run is: not compared)
    prepared: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        self._check_fields()

    # ---- construction --------------------------------------------------------------------------------
    @classmethod
    def create(cls, space: SearchSpace | str, out: str | Path, *, stages: int = 1, subnets: int = 100,
               sequence: Any = None, shared_layers: SharedLayers | str = DEFAULT_SHARED,
               partition: Partition | None = None, **options: Any) -> TrainConfig:
        """Validate user-level arguments (names, strings, counts) into a config; raises ConfigError.

        ``sequence``: a subnet stream or list of subnets to replay (its first ``subnets`` are trained);
        default: the sequence ``sampler`` makes from ``seed`` (default ``fair``; a run resuming from ``resume`` keeps
        the sampler it was trained with). ``partition``: the stages' block ranges (it overrides
        ``stages``); by default ``stages`` ranges balanced on the space's cost model or, with
        ``balance="measured"``, on block costs measured on this machine (``naspipe.preflight.measure``).
        """
        run = {k: options.pop(k) for k in ("seed", "policy", "window") if k in options}  # the RunSpec's part
        split = {k: options.pop(k) for k in ("few_shot", "few_shot_warmup") if k in options}  # (few_shot_run)
        if options.get("sampler") is None and options.get("resume") and sequence is None:
            from naspipe.runtime.checkpoint import recorded_sampler

            options["sampler"] = recorded_sampler(options["resume"])  # a resumed run keeps its own sampler
        if options.get("sampler") is not None:  # also a training option (recorded); the RunSpec makes its sequence
            run["sampler"] = options["sampler"]
        else:
            options.pop("sampler", None)
        cls._check_options(options)  # before a measured partition is profiled
        balance = options.get("balance", "cost")
        if balance not in BALANCES:
            raise ConfigError(f"unknown balance {balance!r}; choose one of {', '.join(BALANCES)}")
        try:
            spec = RunSpec.create(space, stages=stages, subnets=subnets, shared_layers=shared_layers,
                                  sequence=sequence, partition=partition, **run)
            spec = few_shot_run(spec, **split, sampler=options.get("sampler", spec.sampler))
        except RunSpecError as e:
            raise ConfigError(str(e)) from None
        if partition is None and balance == "measured" and spec.stages > 1:
            spec = dataclasses.replace(spec, partition=measured_partition(spec.space, spec.stages, spec.seed))
        return cls.from_spec(spec, out, **options)

    @classmethod
    def from_spec(cls, spec: RunSpec, out: str | Path, **options: Any) -> TrainConfig:
        """The training run of ``spec`` (``naspipe.runspec.spec``, the run description every command shares);
        ``options`` are this class's own fields (optimizer, device, timeout, ``resume``: a run directory or
        checkpoint folder to continue from, ...). Checks and prepares it (``naspipe.runtime.preparation``);
        raises ConfigError."""
        cls._check_options(options)
        # (Path("") is the current folder: a run written there by an empty variable; a newline broke its scripts)
        if (why := out_name_error(str(out))) is not None:
            raise ConfigError(f"out {why}")
        options.setdefault("replicas", spec.replicas)  # (the spec's replicas, unless the options name others)
        options.setdefault("replica_exchange", spec.replica_exchange)
        resume = options.pop("resume", None)  # a run directory or checkpoint/: resolved below
        options.pop("start", None)
        sampler = _parsed_sampler(options.setdefault("sampler", spec.sampler))
        spec = _with_sampler(spec, sampler)
        if sampler.online:
            if spec.replayed:
                raise ConfigError("a run-time generated sequence (sampler) cannot be combined with sequence")
            subs: tuple[Subnet, ...] = ()
            options["subnet_count"] = spec.subnets
        else:  # refuse a sequence too large to hold before it is materialised
            options["sampler"] = spec.sampler  # its canonical name (spread: spread:fair)
            replicas = options.get("replicas", 1)  # one that cannot split the batch: refused by the field checks
            ok = isinstance(replicas, int) and 1 <= replicas <= spec.space.batch_size
            processes = spec.stages * (replicas if ok else 1) + 1  # stages and launcher
            check_sequence_size(spec.space, spec.subnets, processes)
            subs = tuple(spec.stream[j] for j in range(spec.subnets))
        cfg = cls(space=spec.space, out=Path(out), partition=spec.partition, sequence=subs, shared=spec.shared,
                  seed=spec.seed, policy=spec.policy, window=spec.window, **options)  # (checks its fields)
        from naspipe.runtime.preparation import prepare

        return prepare(cfg, resume)

    @classmethod
    def _check_options(cls, options: dict[str, Any]) -> None:
        """Refuse options that are not training options (the run itself comes from a ``RunSpec``)."""
        fixed = {"space", "out", "partition", "sequence", "shared", "seed", "policy", "window", "subnet_count",
                 "prepared"}
        unknown = set(options) - ({f.name for f in dataclasses.fields(cls)} - fixed)
        if unknown:
            raise ConfigError(f"unknown option(s) {sorted(unknown)}")

    def planned(self) -> TrainConfig:
        """This config with its ``csp-plan`` plan chosen (``naspipe.sim.plan_choice``), once, before any process starts:
        simulated on the run's sequence with the space's cost model, then written into ``policy``
        (``csp-plan:plan=S,eps=E``), which every stage parses and the run's config and checkpoints record, so a
        resumed run plans the same. A run-time generated sequence is not known up front: it runs plan 0
        (csp-cp's order), recorded as such (a replay of the run, e.g. the report's, must not plan anew). Any
        other policy, or one naming its plan, is returned as it is."""
        from naspipe.sim import remembered_plan
        from naspipe.sim.plan_choice import eps_of, needs_plan, plan_tries, planned_policy

        if not needs_plan(self.policy):
            return self
        if self.online or plan_tries(self.n) == 1:  # no sequence, or a budget for plan 0 alone: nothing to simulate
            return self.replace(policy=planned_policy(0, eps_of(self.policy)))
        return self.replace(policy=remembered_plan(RunSpec.of(self.space, self.partition, self.stream(), self.policy,
                                                              window=self.window, shared=self.shared)))

    def replace(self, **changes: Any) -> TrainConfig:
        """This config with ``changes``, its fields checked again (cheap: nothing is built). A changed run is not
        prepared (unless ``changes`` say ``prepared``): the launcher prepares it again."""
        changes.setdefault("prepared", False)
        return dataclasses.replace(self, **changes)

    # ---- derived -----------------------------------------------------------------------------------------
    @property
    def stages(self) -> int:
        return self.partition.stages

    @property
    def n(self) -> int:
        return int(self.subnet_count or 0) if self.online else len(self.sequence)

    @property
    def online(self) -> bool:
        """The sequence is generated at run time from the training losses (every stage builds the stream)."""
        return _parsed_sampler(self.sampler).online

    @property
    def policy_name(self) -> str:
        return self.policy.partition(":")[0]

    @property
    def policy_spec(self) -> Policy:
        """The ``Policy`` of ``policy`` (``naspipe.sched.registry``); PolicyError if unknown."""
        return get_policy(self.policy)

    @property
    def policy_options(self) -> dict[str, int]:
        return {k: v for k, v in (("micro_batches", self.micro_batches), ("max_pending_w", self.max_pending_w))
                if v is not None}

    @property
    def backend(self) -> str:
        """NCCL when every process (stage x replica) has a GPU of its own; gloo otherwise (NCCL refuses two
        ranks on one GPU)."""
        if self.device != "cuda":
            return "gloo"
        import torch

        return "nccl" if torch.cuda.device_count() >= self.stages * self.replicas else "gloo"

    def stream(self) -> SubnetStream:
        """The run's stream; with a run-time sampler a fresh ``OnlineStream`` (each stage builds its own)."""
        if self.online:
            return make_stream(self.space, self.seed, self.n, self.sampler)
        return ReplayStream(self.space, self.sequence, valid=True)

    def learning_rate(self) -> float:
        from naspipe.inputs.optim_names import lr_or_default

        return float(lr_or_default(self.optimizer, self.lr))

    def fault_spec(self) -> tuple[str, int, int] | None:
        """``(action, stage, subnet)`` of the injected fault, if any."""
        if not self.fault:
            return None
        parts = self.fault.split(":")
        if len(parts) != 3 or parts[0] not in FAULT_ACTIONS or not all(p.isdigit() for p in parts[1:]):
            raise ConfigError(f"bad fault {self.fault!r}: use ACTION:STAGE:SUBNET with ACTION in "
                              f"{', '.join(FAULT_ACTIONS)}")
        return parts[0], int(parts[1]), int(parts[2])

    def describe(self) -> dict[str, Any]:
        """The configuration as JSON-ready data (recorded in metrics.json)."""
        return {
            "space": self.space.name, "model": dict(self.space.model), "stages": self.stages,
            "partition": self.partition.to_list(), "policy": self.policy, "subnets": self.n, "seed": self.seed,
            "shared_layers": str(self.shared), "window": self.window, "optimizer": self.optimizer,
            "lr": self.learning_rate(), "jitter_ms": self.jitter_ms, "threads": self.threads, "kernels": self.kernels,
            "device": self.device,
            "backend": self.backend, "timeout": self.timeout, "micro_batches": self.micro_batches,
            "max_pending_w": self.max_pending_w, "batch_size": self.space.batch_size,
            "start_method": self.start_method, "balance": self.balance, "sampler": self.sampler,
            **({"device_memory": self.device_memory, "swap": self.swap, "prefetch_depth": self.prefetch_depth,
                "pin": self.pin} if self.device_memory is not None else {}),
            **({"replicas": self.replicas, "replica_exchange": self.replica_exchange} if self.replicas != 1 else {}),
        }

    # ---- validation ----------------------------------------------------------------------------------------
    @property
    def world(self) -> int:
        """The number of processes: stages x replicas."""
        return self.stages * self.replicas

    def _validate_replicas(self) -> None:
        try:  # the rules of replicas in themselves: naspipe.runspec.spec's
            check_replica_settings(self.space, self.replicas, self.replica_exchange)
        except RunSpecError as e:
            raise ConfigError(str(e)) from None
        if self.replicas == 1:
            return
        if not self.policy_spec.replicas:
            raise ConfigError(f"replicas > 1 work with the exact policies {', '.join(replica_policies())}, "
                              f"not {self.policy_name}")
        if self.online:
            raise ConfigError(f"replicas > 1 need a fixed sequence; sampler {self.sampler} generates it at run time")
        if self.device_memory is not None:
            raise ConfigError("replicas > 1 cannot be combined with device_memory (context switching)")

    def _check_fields(self) -> None:
        """The checks of the fields themselves (names, ranges, the policy's options from its declaration): cheap,
        nothing built; run whenever a config is made. ConfigError (one line). What builds or probes is
        ``naspipe.runtime.preparation.prepare``'s."""
        if (why := split_error(self.partition, self.space)) is not None:
            raise ConfigError(why)
        online = self.online
        if online and self.sequence:
            raise ConfigError(f"sampler {self.sampler} generates the sequence; it cannot be combined with one")
        if self.n < 1:
            raise ConfigError("subnets must be >= 1")
        try:
            pol = self.policy_spec
        except PolicyError as e:
            raise ConfigError(str(e)) from None
        if pol.scheduler.__module__ == "__main__":  # the stage processes import the policy's module by name
            raise ConfigError(f"policy {pol.name!r} is defined in __main__ (a notebook or script): stage processes "
                              "cannot import it; define it in a module and register it there")
        if not isinstance(self.window, int) or self.window < 1:
            raise ConfigError(f"window must be >= 1, got {self.window!r}")
        m = self._micro_batches()
        if online and m:  # bsp: a group's forwards precede its B
            lag = self.stream().sampler.lag  # an OnlineStream's (naspipe.sequences.sequence)
            if lag < m:
                raise ConfigError(f"sampler {self.sampler} with policy {self.policy}: the lag must be at least the "
                                  f"group of {m} subnets (subnet j needs the loss of j - {lag}, known after B)")
        if not pol.delayed_shared and self.shared.mode == "delayed" and self.shared.delay > 0:
            raise ConfigError(f"policy {self.policy_name} trains shared layers with its own synchronisation "
                              f"(bsp: at the group's flush, asp: stashed like candidates); use shared layers "
                              f"frozen or serial, not {self.shared}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        if self.lr is not None and (why := lr_error(self.lr)) is not None:
            raise ConfigError(f"lr {why}")
        if not (isinstance(self.jitter_ms, (int, float)) and 0 <= self.jitter_ms < math.inf):
            raise ConfigError(f"jitter_ms must be a finite number >= 0, got {self.jitter_ms!r}")
        if (why := threads_error(self.threads)) is not None:
            raise ConfigError(f"threads {why}")
        if (why := kernels.kind_error(self.kernels)) is not None:
            raise ConfigError(why)
        self._validate_replicas()
        if not (isinstance(self.timeout, (int, float)) and 0 < self.timeout < math.inf):
            raise ConfigError(f"timeout must be a finite number of seconds > 0, got {self.timeout!r}")
        if self.device not in DEVICES:  # (whether this machine has CUDA: the preparation's question)
            raise ConfigError(f"unknown device {self.device!r}; choose one of {', '.join(DEVICES)}")
        if self.balance not in BALANCES:
            raise ConfigError(f"unknown balance {self.balance!r}; choose one of {', '.join(BALANCES)}")
        if self.start_method not in START_METHODS:
            raise ConfigError(f"unknown start method {self.start_method!r}; choose one of {', '.join(START_METHODS)}")
        if self.port is not None and not (isinstance(self.port, int) and 0 < self.port < 65536):
            raise ConfigError(f"port must lie in 1..65535, got {self.port!r}")
        if not isinstance(self.prepared, bool):
            raise ConfigError(f"prepared must be True or False, got {self.prepared!r}")
        self.fault_spec()
        self._validate_checkpoints()
        self._validate_memory()

    def _micro_batches(self) -> int | None:
        """The subnets one update of the policy groups (bsp's micro-batches), read from the policy's declaration
        (``naspipe.sched.registry``), no scheduler built; None when it writes per subnet."""
        try:
            return micro_batches_of(self.policy, **self.policy_options)
        except PolicyError as e:
            raise ConfigError(str(e)) from None

    def _validate_memory(self) -> None:
        """The settings of context switching (the budget against the stage models is the preparation's)."""
        if self.device_memory is None:
            return
        from naspipe.inputs.memsize import SizeError, parse_budget
        from naspipe.sim.memory import SWAP_MODES  # (torch-free: the one list)

        if self.swap not in SWAP_MODES:
            raise ConfigError(f"unknown swap {self.swap!r}; choose one of {', '.join(SWAP_MODES)}")
        if self.pin not in ("task", "subnet"):
            raise ConfigError(f"unknown pin {self.pin!r}; choose task or subnet")
        if not isinstance(self.prefetch_depth, int) or isinstance(self.prefetch_depth, bool) or \
                self.prefetch_depth < 1:
            raise ConfigError(f"prefetch_depth must be a whole number >= 1, got {self.prefetch_depth!r}")
        try:
            if parse_budget(self.device_memory).unlimited:
                raise ConfigError("device_memory must be a size (2GiB) or a share (25%), not unlimited")
        except SizeError as e:
            raise ConfigError(str(e)) from None
        if self.online:
            raise ConfigError("device_memory (context switching) needs a fixed sequence, not a run-time sampler")
        if self.device != "cpu":
            raise ConfigError("device_memory (context switching) runs on device cpu only so far")
        if not self.policy_spec.context_switch:
            names = ", ".join(n for n in policy_names() if get_policy(n).context_switch)
            raise ConfigError(f"device_memory (context switching) needs policy {names}, not {self.policy}")

    def _validate_checkpoints(self) -> None:
        every, keep = self.checkpoint_every, self.keep_checkpoints
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ConfigError(f"keep_checkpoints must be a whole number of checkpoints >= 1, got {keep!r}")
        if keep > 1 and every is None:
            raise ConfigError(f"keep_checkpoints {keep} needs checkpoint_every N: without it the run writes no "
                              "checkpoints to keep")
        if every is None and not self.start and self.resume is None:
            return
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ConfigError(f"checkpoint_every must be a whole number of subnets >= 1, got {every!r}")
        if getattr(self, "online", False):
            raise ConfigError("checkpoints do not support run-time generated sequences (sampler) yet")
        if not isinstance(self.start, int) or not 0 <= self.start < self.n:
            raise ConfigError(f"start must lie in [0, {self.n}), got {self.start!r}")
        if self.start and self.resume is None:
            raise ConfigError("start > 0 needs the checkpoint to resume from (resume)")
        if not self.policy_spec.checkpoints:
            raise ConfigError(f"policy {self.policy} cannot checkpoint yet: its update rule's state (weight "
                              "versions, pending updates, corrections) is not saved")
        m = self._micro_batches()
        if m and (why := group_resume_error(self.start, m)) is not None:  # (every stage's scheduler asks too)
            raise ConfigError(why)
        if every is not None and m and every % m:
            raise ConfigError(f"policy {self.policy} checkpoints only at group boundaries: checkpoint_every "
                              f"must be a multiple of its {m} micro-batches, got {every}")


SEQUENCE_MEMORY_SHARE = 0.25  # the fixed sequence's copies (launcher and every stage) may take this share of memory


def check_sequence_size(space: SearchSpace, subnets: int, processes: int) -> None:
    """Refuse a fixed sequence too large to hold before anything is built: each of ``processes`` processes (a
    training run: the launcher and every stage) keeps one copy, a tuple of ``num_blocks`` small ints per subnet
    (about ``64 + 8 * num_blocks`` bytes)."""
    from naspipe.preflight.modelcheck import machine_memory

    per = 64 + 8 * space.num_blocks
    need = subnets * per * processes
    total = machine_memory()
    if total is not None and need > SEQUENCE_MEMORY_SHARE * total:
        most = int(SEQUENCE_MEMORY_SHARE * total // (per * processes))
        raise ConfigError(f"{subnets} subnets would need about {need / 2**30:.1f} GiB to hold the sequence in "
                          f"{processes} process{'es' if processes > 1 else ''}, more than "
                          f"{SEQUENCE_MEMORY_SHARE:.0%} of this machine's {total / 2**30:.1f} GiB; train at most "
                          f"{most} subnets per run")


def measured_partition(space: SearchSpace, stages: int, seed: int = 0) -> Partition:
    """A partition balanced on block costs measured on this machine (builds the model: needs torch)."""
    from naspipe.preflight.modelcheck import ModelCheckError, check_model

    try:
        check_model(space, seed)
    except ModelCheckError as e:
        raise ConfigError(str(e)) from None
    from naspipe.preflight.measure import measure_block_costs

    return make_partition(space, stages, profile=measure_block_costs(space, seed))
