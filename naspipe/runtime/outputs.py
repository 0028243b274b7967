"""Merging the stages' part files into the run's outputs, and the metrics of a measured run.

Why it exists: every stage writes only what it knows (``OUT/parts/stage<s>.json``: its losses, parameter
hashes, trace events and timings). After the run, the launcher (or rank 0 under torchrun) merges them into
the files every naspipe run has:

* ``losses.csv`` (``subnet,loss``, the loss as ``float.hex``) and ``params.json`` (global parameter name ->
  SHA-256), written with ``naspipe.runfolder.results`` so ``naspipe verify`` compares them with the reference;
* ``trace.json``: a naspipe ``Trace`` (the simulator's format);
* ``metrics.json``: throughput, utilisation, overheads, wall time and the full configuration;
* ``sequence.json``: the subnet sequence the stages trained (for a run-time generated stream, the one
  the stages realized; every stage's digest must agree), in ``naspipe.sequences.sequence.save_sequence``'s format;
* ``weights-stage<s>.pt`` (written by each stage, ``naspipe.models.weights``, unless ``save_weights=False``):
  ``naspipe search`` reads them;
* ``status.json``: ``{"complete": true}``, or the error when the run failed (outputs so far are kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.fileio import jsonfile
from naspipe.fileio.atomic import write_text_atomic
from naspipe.runfolder import runs
from naspipe.runtime.config import TrainConfig
from naspipe.sched.trace import Trace, TraceEvent


@dataclass
class RunResult:
    """A finished training run: its directory and what was written there."""

    out: Path
    losses: dict[int, float]
    params: dict[str, str]
    trace: Trace
    metrics: dict[str, Any]
    config: TrainConfig

    def verify(self, other: str | Path) -> tuple[bool, str]:
        """Bit-for-bit comparison with another run directory (e.g. the reference's)."""
        from naspipe.runfolder.results import verify

        return verify(self.out, other)

    def summary(self) -> str:
        """One line for a person (``throughput_line``): which time each rate and duration counts."""
        return throughput_line(self.metrics)


def throughput_line(m: dict[str, Any]) -> str:
    """What a run's metrics say about its speed, each figure naming the time it divides by: subnets/s is over
    the training time (first task start to last task end, ``makespan_s``), the wall clock also counts starting
    the stage processes (``startup_s``) and merging their outputs; so subnets / wall clock is lower."""
    n, train, wall, start = m.get("subnets"), m.get("makespan_s"), m.get("wall_s"), m.get("startup_s")
    rate = m.get("subnets_per_s")
    txt = trained_text(m)
    n = m.get("trained_subnets", n)
    if train:
        txt += f" in {train:.2f} s of training (first task to last task): {rate:.1f} subnets/s"
    if wall:
        txt += f"; {wall:.2f} s wall clock in all"
        if start is not None:
            txt += f", of which {start:.1f} s starting the stage processes"
        txt += f" ({n / wall:.1f} subnets per wall-clock second)"
    if m.get("utilization") is not None:
        txt += f"; utilisation {m['utilization']:.2f}"
    if m.get("final_loss") is not None:
        txt += f", final loss {m['final_loss']:.4f}"
    return txt


def trained_text(m: dict[str, Any]) -> str:
    """What this invocation trained: "trained 40 subnets", or for a resumed run "resumed at subnet 15: trained
    25 subnets (15..39 of 40)"."""
    n, at = m.get("subnets"), m.get("resumed_at")
    if not at:
        return f"trained {n} subnets"
    done = m.get("trained_subnets", n - at)
    return f"resumed at subnet {at}: trained {done} subnets ({at}..{n - 1} of {n})"


def write_status(out: Path, complete: bool, error: str | None = None, rank: int | None = None,
                 checkpoint: int | None = None, lost: dict[str, Any] | None = None) -> None:
    """``checkpoint``: the position of the newest complete checkpoint of a failed run (resume from it);
    ``lost``: the host (and its ranks) a torchrun run lost."""
    data: dict[str, Any] = {"complete": complete}
    if error is not None:
        data.update(error=error, rank=rank)
    if checkpoint is not None:
        data.update(checkpoint=checkpoint)
    if lost is not None:
        data.update(lost=lost)
    try:  # atomic: a full disk leaves the old status.json (or none), never an empty one
        write_text_atomic(out / runs.STATUS, json.dumps(data, indent=1) + "\n")
    except OSError:  # the directory went away or the disk is full: the error itself is what matters
        pass


class MergeError(RuntimeError):
    """The stages' part files could not be merged; the message is one line naming the file or the disagreement."""


# what a part file holds (``naspipe.runtime.processes.worker``): every field the merge reads
PART_FIELDS: dict[str, type | None] = {"losses": dict, "params": dict, "events": list, "timing": dict,
                                       "decisions": None, "bytes_sent": None, "peak_in_flight": None,
                                       "peak_fixed_versions": None}


def merge_failed(out: Path, e: MergeError) -> str:
    """The one line of a run whose stages finished but whose part files could not be merged: what is true (the
    cause, the parts kept), and what to do."""
    parts = Path(out) / runs.PARTS
    return (f"every stage finished, but their results could not be merged: {e}; the stages' results are kept in "
            f"{str(parts)!r} (nothing was deleted); to train again, run the same command with --overwrite")


def read_parts(out: Path, stages: int) -> list[dict[str, Any]]:
    """Every stage's ``parts/stage<s>.json``; MergeError naming the first that is missing, not valid JSON, or
    lacks a field the merge reads."""
    parts = []
    for s in range(stages):
        p = out / runs.PARTS / f"stage{s}.json"
        try:
            data = jsonfile.loads(p.read_text())
        except FileNotFoundError:
            raise MergeError(f"stage {s} left no results ({str(p)!r} does not exist)") from None
        except OSError as e:
            raise MergeError(f"cannot read {str(p)!r}: {e.strerror or e}") from None
        except ValueError as e:  # (malformed, not UTF-8, nested too deeply)
            raise MergeError(f"{str(p)!r} is not valid JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(data, dict):
            raise MergeError(f"{str(p)!r} holds {type(data).__name__}, not a stage's results")
        for field, kind in PART_FIELDS.items():
            if field not in data:
                raise MergeError(f"{str(p)!r} has no {field!r}")
            if kind is not None and not isinstance(data[field], kind):
                raise MergeError(f"{str(p)!r}: {field!r} is {type(data[field]).__name__}, not {kind.__name__}")
        parts.append(data)
    return parts


def run_metrics(cfg: TrainConfig, parts: list[dict[str, Any]], trace: Trace, losses: dict[int, float],
                wall_s: float | None = None, startup_s: float | None = None) -> dict[str, Any]:
    """Throughput, utilisation and overheads of a measured run.

    ``overhead_share``: time a stage spent neither computing nor blocked waiting for a message nor in
    jitter sleeps (scheduling decisions, message handling, logging), over its compute time, summed over
    stages. ``wall_overhead_share``: (wall per stage - compute) / compute, which also counts pipeline
    bubbles (waiting for neighbours or the causal rule).
    """
    n = cfg.n
    done = n - int(getattr(cfg, "start", 0) or 0)  # subnets trained by this run (a resume: fewer)
    makespan = trace.makespan
    timing = [p["timing"] for p in parts]
    compute = sum(t["compute"] for t in timing)
    overhead = sum(t["overhead"] for t in timing)
    tasks = sum(t["tasks"] for t in timing)
    stage_wall = [t["loop"] for t in timing]
    last = [losses[j] for j in sorted(losses)][-max(1, n // 10):] if losses else []
    return {
        "command": "train",
        "driver": "runtime",
        "subnets": n,
        "resumed_at": int(getattr(cfg, "start", 0) or 0) or None,  # a resumed run: the checkpoint's subnet
        "trained_subnets": done,  # by this invocation (the rates divide these)
        "wall_s": wall_s,
        "startup_s": startup_s,
        "makespan_s": makespan,
        "subnets_per_s": done / makespan if makespan > 0 else None,
        "samples_per_s": done * cfg.space.batch_size / makespan if makespan > 0 else None,
        "utilization": trace.utilization(),
        "stage_utilization": trace.stage_utilization(),
        "compute_s": compute,
        "overhead_share": overhead / compute if compute > 0 else None,
        "stage_overhead_share": [t["overhead"] / t["compute"] if t["compute"] > 0 else None for t in timing],
        "per_task_overhead_us": 1e6 * overhead / tasks if tasks else None,
        "wall_overhead_share": (sum(stage_wall) - compute) / compute if compute > 0 else None,
        "stage_wait_s": [t["wait"] for t in timing],
        "jitter_s": sum(t["jitter"] for t in timing),
        "decisions": sum(p["decisions"] for p in parts),
        "decision_us_mean": 1e6 * sum(t["decide"] for t in timing) / max(1, sum(p["decisions"] for p in parts)),
        "tasks": tasks,
        "bytes_sent": sum(p["bytes_sent"] for p in parts),
        "boundaries": boundaries(parts),
        "peak_in_flight": [p["peak_in_flight"] for p in parts],
        "peak_fixed_versions": [p["peak_fixed_versions"] for p in parts],
        "final_loss": losses[n - 1] if n - 1 in losses else None,
        "mean_loss_last_10pct": sum(last) / len(last) if last else None,
        "config": {**cfg.describe(), "checkpoint_every": getattr(cfg, "checkpoint_every", None),
                   **({"keep_checkpoints": keep} if (keep := getattr(cfg, "keep_checkpoints", 1)) != 1 else {}),
                   "resumed_from": getattr(cfg, "start", 0)},
        "sequence": _sequence_stats(cfg, parts),
    }


def boundaries(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage boundary ``s -> s+1`` (one pipeline; with replicas each replica's the same): the activation and
    gradient messages that crossed it, their largest payload in bytes (a structured message: the sum of its
    distinct tensors, ``naspipe.supernet.messages``), the most tensors in one, and whether they were structured."""
    out = []
    by_stage = {p["stage"]: p.get("traffic") for p in parts}
    for s in range(len(parts) - 1):
        act = (by_stage.get(s) or {}).get("activation")
        grad = (by_stage.get(s + 1) or {}).get("gradient")
        if act is None or grad is None:
            continue
        out.append({"from": s, "to": s + 1, "messages": act["messages"],
                    "activation_bytes": act["largest"], "activation_total_bytes": act["bytes"],
                    "activation_tensors": act["tensors"],
                    "gradient_bytes": grad["largest"], "gradient_tensors": grad["tensors"],
                    "structured": act["structured"]})
    return out


def boundaries_line(m: dict[str, Any]) -> str | None:
    """One line naming each stage boundary's message size, for runs whose messages are structured (else None)."""
    bs = m.get("boundaries") or []
    if not any(b["structured"] for b in bs):
        return None
    parts = [f"{b['from']}->{b['to']} {b['activation_bytes']:,} B in {b['activation_tensors']} tensor"
             f"{'s' if b['activation_tensors'] != 1 else ''} (gradient {b['gradient_bytes']:,} B)" for b in bs]
    return "messages per stage boundary: " + ", ".join(parts)


def _sequence_stats(cfg: TrainConfig, parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The trained sequence's conflicts within the stage count and its reuse distances
    (``naspipe.sequences.conflicts``)."""
    from naspipe.sequences.conflicts import conflict_stats
    from naspipe.sequences.sequence import ReplayStream

    if cfg.online:
        if not parts or "subnets" not in parts[0]:
            return None
        subs = list(ReplayStream(cfg.space, parts[0]["subnets"]))
    else:
        subs = list(cfg.sequence)
    return conflict_stats(cfg.space, subs, cfg.stages)


def merge_outputs(cfg: TrainConfig, wall_s: float | None = None, startup_s: float | None = None) -> RunResult:
    """Merge ``OUT/parts`` into losses.csv, params.json, trace.json, metrics.json and status.json."""
    import torch

    from naspipe.runfolder.results import LOSSES, METRICS, PARAMS, write_losses, write_metrics, write_params

    out = cfg.out
    parts = read_parts(out, cfg.stages)
    try:
        losses = {int(j): float.fromhex(h) for p in parts for j, h in p["losses"].items()}
        if len(losses) != cfg.n:
            raise MergeError(f"the last stage reported {len(losses)} losses for {cfg.n} subnets")
        params: dict[str, str] = {}
        for p in parts:
            params.update(p["params"])
        meta = {"driver": "runtime", **cfg.describe()}
        trace = Trace(cfg.stages, [TraceEvent(**e) for p in parts for e in p["events"]], meta)
        digests = {p.get("sequence_sha256") for p in parts}
        if len(digests) != 1:
            raise MergeError(f"the stages trained different subnet sequences (digests {sorted(map(str, digests))})")
        metrics = run_metrics(cfg, parts, trace, losses, wall_s, startup_s)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a part file of the right shape, wrong contents
        raise MergeError(f"the part files in {str(out / runs.PARTS)!r} are malformed ({type(e).__name__}: {e})") \
            from None
    metrics["torch"] = torch.__version__
    from naspipe.runtime.layer_cache.switching import merge_reports

    memory = merge_reports(parts)
    if memory is not None:
        metrics["memory"] = memory
    metrics["config"]["sequence_sha256"] = digests.pop()

    from naspipe.sequences.sequence import subnets_digest

    realized = parts[0].get("subnets")  # a sequence generated at run time
    runs.write_run(out, "train", runs.train_identity(cfg, metrics["config"]["sequence_sha256"],
                                                     subnets_digest(realized) if realized else None))
    if "subnets" in parts[0]:  # the realized sequence (replayable with --sequence)
        from naspipe.sequences.sequence import ReplayStream, save_sequence

        save_sequence(ReplayStream(cfg.space, parts[0]["subnets"]), out / runs.SEQUENCE)
    elif cfg.sampler != "uniform":  # made by a seeded sampler (fair, spread): replayable with --sequence too
        from naspipe.sequences.sequence import save_sequence

        save_sequence(cfg.stream(), out / runs.SEQUENCE)
    write_losses(out / LOSSES, losses)
    write_params(out / PARAMS, params)
    trace.save(out / runs.TRACE)
    write_metrics(out / METRICS, metrics)
    write_status(out, True)
    return RunResult(out, losses, params, trace, metrics, cfg)
