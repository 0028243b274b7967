"""The stage process: one pipeline stage driven by its ``StageScheduler``, exactly as the simulator does.

Why it exists: this is the runtime's event loop. Each iteration delivers every message that arrived
(``on_activation`` / ``on_gradient``), asks the scheduler for the next task, runs it on the
``StageExecutor``, sends the result to the neighbour, tells the scheduler (``on_finish``) and records a
trace event. When nothing is runnable it blocks on the inbox, with a timeout: a stage never waits
forever, and a timeout names the stage and what it was waiting for. The barriers at the start and the end of the
run wait ``--timeout`` too (``barrier``) and name the ranks that did not come.

Entry points: ``spawn_entry`` is the target of the single-machine launcher (one process per stage,
progress and errors go back through a pipe, and a lifeline pipe ends the worker if the launcher dies);
``run_stage`` is the same worker under any launcher that set the ``env://`` variables (``torchrun``).
At the end each stage writes ``OUT/parts/stage<s>.json`` (losses, parameter hashes, trace events,
timings), which the launcher merges.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import queue
import re
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from naspipe.fileio.atomic import disk_full_message, is_disk_full, write_atomic, write_text_atomic
from naspipe.lifecycle import kernels
from naspipe.lifecycle.startup import import_at_start
from naspipe.models import build_stage
from naspipe.models.weights import save_weights
from naspipe.runfolder import runs
from naspipe.runfolder.results import param_hashes
from naspipe.runtime.checkpoint import Checkpointer
from naspipe.runtime.config import TrainConfig
from naspipe.runtime.processes.jitter import jitter_seconds
from naspipe.runtime.processes.online import LossBook
from naspipe.runtime.processes.recorder import EventLog
from naspipe.runtime.stage_exec import StageExecutor
from naspipe.runtime.stagerun import StageRun
from naspipe.runtime.transport.comm import ACTIVATION, GRADIENT, ChannelFailure, Links, Message, TransportError
from naspipe.runtime.transport.replica_group import ReplicaGroup, WriteOrder, next_task_writing
from naspipe.sched.policies import make_scheduler, stage_specs
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.supernet.usercode import first_line, origin

Report = Callable[..., None]  # report(kind, *payload): "ready", "progress", ...


class StageTimeout(RuntimeError):
    pass


class InjectedFault(RuntimeError):
    pass


class PeerLost(RuntimeError):
    """A neighbour's channel failed: usually the consequence of another stage's failure."""

    def __init__(self, text: str, peer: int | None = None):
        super().__init__(text)
        self.peer = peer  # the neighbour's global rank


def device_for(cfg: TrainConfig, local_rank: int) -> torch.device:
    if cfg.device == "cuda":
        # bit-identical CUDA runs: deterministic kernels, and the cuBLAS workspace that makes them possible
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        dev = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _fault(spec: tuple[str, int, int] | None, cfg: TrainConfig, rank: int, task: Task) -> None:
    """Fire the injected fault ``spec`` if ``task`` is its trigger (tests of the supervision)."""
    if spec is None:
        return
    action, stage, subnet = spec
    if stage != rank or task.subnet != subnet:
        return
    if action == "raise":
        raise InjectedFault(f"injected fault at {task}")
    sys.stderr.flush()
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "exit":
        os._exit(3)
    if action == "hang":
        time.sleep(10 * cfg.timeout + 3600)


def run_stage(rank: int, world: int, cfg: TrainConfig, report: Report | None = None, local_rank: int = 0,
              after_barrier: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run stage ``rank`` of ``world`` to the end; the process group is rendezvoused via ``env://``.

    Returns (and writes to ``OUT/parts/stage<rank>.json``) the stage's report. ``after_barrier`` runs on
    every rank after the final barrier, before the process group is destroyed (rank 0 merges there).
    """
    report = report or (lambda *a: None)
    kernels.require(cfg.kernels, f"stage {rank % cfg.stages}")  # never trains one kind while the run says another
    if world != cfg.world:
        raise RuntimeError(f"the run has {cfg.stages} stages x {cfg.replicas} replicas but the process group has "
                           f"{world} processes")
    device = device_for(cfg, local_rank)
    # the process group's own timeout (its rendezvous, a receive in flight) leaves the stage loop's shorter inbox
    # timeout room to fire first with its clearer message; the barriers wait --timeout (``barrier``)
    dist.init_process_group(cfg.backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=max(2 * cfg.timeout, 60.0)))
    try:
        result = _run(rank, world, cfg, device, report)
        barrier(cfg, rank, "the end of the run")
        if after_barrier is not None:
            after_barrier()
        return result
    finally:
        gc.collect()  # objects in reference cycles that hold a process group go before the group does
        dist.destroy_process_group()


def _run(grank: int, world: int, cfg: TrainConfig, device: torch.device, report: Report) -> dict[str, Any]:
    run = StageRun.of(cfg, grank, device)  # this stage's place in the run, its policy parsed once
    rank, replica = run.stage, run.replica
    spec = stage_specs(cfg.space, cfg.partition, cfg.shared)[rank]
    stream = cfg.stream()
    ckpt = Checkpointer(cfg, run)  # resume at ckpt.start; fences at the checkpoints (replica 0 saves)
    sched = make_scheduler(cfg.policy, spec, stream, cfg.window, start=ckpt.start, fence=ckpt.fence,
                           **cfg.policy_options)
    model = build_stage(cfg.space, cfg.partition.blocks(rank), cfg.seed, cfg.shared).to(device)
    delay = cfg.shared.delay if cfg.shared.trains_shared else None
    ex = StageExecutor(model, stream, run, seed=cfg.seed, optimizer=cfg.optimizer, lr=cfg.learning_rate(),
                       shared_delay=delay, write_kind=sched.write_kind, micro_batches=sched.micro_batches)
    ckpt.restore(ex)
    inbox: queue.Queue = queue.Queue()
    links = Links(run, cfg.n - ckpt.start, inbox, cfg.timeout)
    if cfg.replicas > 1:  # (collective: after the links' groups, in the same order on every rank)
        ex.reducer = ReplicaGroup(run, cfg.timeout, native=cfg.replica_exchange == "native")
    cfg.out.mkdir(parents=True, exist_ok=True)  # (another machine's view of the run directory)
    log = EventLog(rank, cfg.out / runs.EVENTS if replica == 0 else None)
    mem = None
    try:  # from here on the event log (and the cache's copy thread) are closed whatever happens
        if cfg.device_memory is not None:  # context switching (naspipe.runtime.layer_cache.switching); off by default
            from naspipe.runtime.layer_cache.switching import ContextSwitch

            mem = ContextSwitch(model, ex.bank, stream, cfg.n, device_memory=cfg.device_memory, swap=cfg.swap,
                              depth=cfg.prefetch_depth, optimizer=cfg.optimizer, write_kind=sched.write_kind,
                              clock=log.now, timeout=cfg.timeout, start=ckpt.start, pin=cfg.pin)
        ex.warm_up()
        if mem is not None:
            mem.warm_up()  # the first forecast tasks' candidates, before the run's clock starts
        links.start()
        if ex.reducer is not None:
            ex.reducer.start(cfg.n - ckpt.start, inbox)
        barrier(cfg, grank, "the start of the run")  # every stage is built and listening: the run starts now
        log.start_clock()
        report("ready", rank)
        book = LossBook(stream, sched)
        timing = _loop(rank, cfg, sched, ex, links, inbox, log, report, book, ckpt=ckpt, mem=mem)
        links.flush()
        links.join(cfg.timeout)
        if ex.reducer is not None:
            ex.reducer.close(cfg.timeout)
    finally:
        if mem is not None:
            mem.close()  # every candidate back in host memory before hashes and weights are taken
            log.events.extend(mem.trace_events(rank))
        log.close()
    if replica > 0:  # replica 0 of the stage reports it (same weights; the combined losses)
        return {"stage": rank, "replica": replica, "timing": timing}
    result = {
        "stage": rank, "blocks": list(cfg.partition.bounds[rank]), "pid": os.getpid(),
        "losses": {str(j): v.hex() for j, v in sorted(ex.losses.items())},
        "params": param_hashes(model.global_named_parameters()),
        "events": [e.to_dict() for e in log.events],
        "timing": timing,
        "decisions": sched.decisions, "bytes_sent": links.bytes_sent, "peak_in_flight": ex.peak_stash,
        "traffic": links.traffic,
        "updates": ex.updates, "peak_fixed_versions": ex.rule.held_versions(),
        "sequence_sha256": stream.digest(), "losses_learned": book.learned,
        **({"replicas": cfg.replicas, "bytes_gathered": ex.reducer.bytes_gathered} if ex.reducer else {}),
    }
    if mem is not None:
        result["memory"] = mem.report(timing["loop"])
    if rank == 0:  # the realized sequence (every stage's digest must match it: checked by the merge)
        result["subnets"] = [list(stream[j]) for j in range(cfg.n)]
    if cfg.save_weights:
        save_weights(model, cfg.out / f"weights-stage{rank}.pt")  # naspipe search reads them
    parts = cfg.out / "parts"
    parts.mkdir(exist_ok=True)
    write_atomic(parts / f"stage{rank}.json", json.dumps(result).encode())
    return result


def _loop(rank: int, cfg: TrainConfig, sched: Any, ex: Any, links: Links, inbox: queue.Queue, log: EventLog,
          report: Report, book: LossBook, ckpt: Checkpointer | None = None, mem: Any = None) -> dict[str, float]:
    acts: dict[int, tuple[torch.Tensor | None, bool]] = {}
    grads: dict[int, torch.Tensor | None] = {}
    compute = wait = jitter = decide = 0.0
    tasks = written = 0
    last_report = 0.0
    clock = time.perf_counter
    fault = cfg.fault_spec()
    reducer = getattr(ex, "reducer", None)
    follower = reducer is not None and reducer.replica > 0
    announced: deque[int] = deque()  # a follower's next writes, as its leader started them

    def deliver(item: Message | ChannelFailure | WriteOrder) -> None:
        if isinstance(item, ChannelFailure):
            raise PeerLost(item.text, item.peer)
        if isinstance(item, WriteOrder):
            announced.append(item.subnet)
            return
        if item.kind == ACTIVATION:
            acts[item.subnet] = (item.tensor, item.requires_grad)
            sched.on_activation(item.subnet)
        else:
            grads[item.subnet] = item.tensor
            book.learn(item.subnet, item.loss)  # before B(j) can run: B(j) forwards it upstream
            sched.on_gradient(item.subnet)

    start = clock()
    while not sched.finished:
        while True:  # everything that arrived, so the decision sees it
            try:
                deliver(inbox.get_nowait())
            except queue.Empty:
                break
        t = clock()
        if mem is not None:  # (memory: the admission gate)
            task = mem.next_task(sched)
        elif follower:  # a replica writes in its leader's order (naspipe.runtime.transport.replica_group)
            task = next_task_writing(sched, announced[0] if announced else None)
        else:
            task = sched.next_task()
        if task is not None and reducer is not None and task.kind == sched.write_kind:
            if follower:
                announced.popleft()
            else:
                reducer.announce(task.subnet)
        decide += clock() - t
        if task is None:
            t = clock()
            try:
                item = inbox.get(timeout=cfg.timeout)
            except queue.Empty:
                raise StageTimeout(_stuck(rank, cfg, sched, links) + book.waiting()) from None
            wait += clock() - t
            deliver(item)
            continue
        _fault(fault, cfg, rank, task)
        if cfg.jitter_ms > 0:
            t = clock()
            time.sleep(jitter_seconds(cfg.seed, task.kind, task.subnet, rank, cfg.jitter_ms))
            jitter += clock() - t
        version = ex.updates
        if mem is not None:  # the task's candidates on the device (a miss: a recorded stall)
            mem.before(task)
        t0 = log.now()
        if mem is None:
            _execute(task, ex, links, acts, grads, book)
        else:
            with mem.context(task):
                _execute(task, ex, links, acts, grads, book)
        t1 = log.now()
        compute += t1 - t0
        t = clock()
        sched.on_finish(task)
        if mem is not None:  # release at the subnet's write; prefetch the forecast (or evict on demand)
            mem.after(task, sched)
        if ex.last and task.kind == FORWARD:  # the loss is known at F(j) on the last stage
            book.learn(task.subnet, ex.losses[task.subnet])
        decide += clock() - t
        log.record(task.kind, task.subnet, t0, t1, version=ex.version_read(task.kind, task.subnet, version))
        tasks += 1
        if task.kind == sched.write_kind:
            written += 1
            now = clock()
            if now - last_report > 0.1 or sched.finished:
                report("progress", rank, written)
                last_report = now
        if ckpt is not None:  # at a fence: save this stage's state, then lift the fence
            ckpt.after_task(sched, ex, None if mem is None else mem.quiesce)
    if ckpt is not None:
        ckpt.finish()
    loop = clock() - start
    report("progress", rank, written)
    return {"loop": loop, "compute": compute, "wait": wait, "jitter": jitter, "decide": decide, "tasks": tasks,
            "overhead": max(0.0, loop - compute - wait - jitter), "end": log.now()}


def _execute(task: Task, ex: Any, links: Links, acts: dict, grads: dict, book: LossBook) -> None:
    j = task.subnet
    if task.kind == FORWARD:
        x, rg = acts.pop(j) if not ex.first else (None, False)
        out, out_rg = ex.forward(j, x, rg)
        if not ex.last:
            links.send_activation(j, out, out_rg)
    elif task.kind == BACKWARD:
        g = grads.pop(j) if not ex.last else None

        def send(gin: torch.Tensor | None) -> None:  # (before this stage's update: upstream need not wait)
            loss = book.take(j)
            if not ex.first:
                links.send_gradient(j, gin, loss)  # the loss rides in the header (naspipe.runtime.processes.online)

        ex.backward(j, g, send=send)
    elif task.kind == WEIGHT:
        ex.weight(j)
    else:
        raise RuntimeError(f"unknown task kind {task.kind!r}")


def failure_line(e: BaseException) -> str:
    """A stage's failure in one line: the exception's type, where user code raised it, its message's first line."""
    return f"{type(e).__name__}{origin(e)}: {first_line(e)}"


CONSEQUENCES = (PeerLost, TransportError, dist.DistError)  # errors that report another stage's failure


def is_root_cause(e: BaseException) -> bool:
    """False for errors that only report another stage's failure (a lost peer, a broken transport)."""
    return not isinstance(e, CONSEQUENCES)


def consequence_names() -> set[str]:
    """The class names of ``CONSEQUENCES`` and their subclasses: how an ``error-stage<rank>.txt`` written by
    another process (its first line starts with the name) is told apart from a root cause."""
    names, todo = set(), list(CONSEQUENCES)
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


BARRIER_FLOOR_S = 10.0  # a barrier waits at least this long (stages build and warm up at their own pace)


def barrier(cfg: TrainConfig, rank: int, where: str) -> None:
    """Every rank meets here, waiting at most ``cfg.timeout`` s (``BARRIER_FLOOR_S`` at least); past it, a
    ``StageTimeout`` names the place and, on rank 0, the ranks that did not arrive. A rank that went away is
    met as before (its error, a consequence, names no stage that timed out)."""
    limit = max(cfg.timeout, BARRIER_FLOOR_S)
    if dist.get_backend() != "gloo":  # (NCCL has no monitored barrier: the process group's own timeout holds)
        dist.barrier()
        return
    t0 = time.monotonic()
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=limit), wait_all_ranks=True)
    except Exception as e:
        if time.monotonic() - t0 < 0.9 * limit:  # (ended early: a lost rank, not a timeout)
            raise
        missing = _ranks_named(str(e)) if rank == 0 else []
        who = f"rank(s) {', '.join(map(str, missing))}" if missing else "the other ranks (rank 0's error names them)"
        raise StageTimeout(f"stage {rank % cfg.stages} (rank {rank}) waited {limit:g} s at {where} for {who} "
                           "(--timeout)") from None


def _ranks_named(text: str) -> list[int]:
    """The ranks gloo's monitored barrier names as not arrived (``Ranks 1, 3 failed to pass ...``)."""
    m = re.search(r"Ranks? ([\d, ]+) failed to pass", text)
    return sorted({int(x) for x in re.findall(r"\d+", m.group(1))}) if m else []


def _stuck(rank: int, cfg: TrainConfig, sched: Any, links: Links) -> str:
    need = []
    if rank > 0:
        need.append(f"activations from stage {rank - 1} ({links.received[ACTIVATION]} of {cfg.n} received)")
    if rank < cfg.stages - 1:
        need.append(f"gradients from stage {rank + 1} ({links.received[GRADIENT]} of {cfg.n} received)")
    return (f"stage {rank} waited {cfg.timeout:g} s without a message; it needs "
            f"{' and '.join(need) or 'nothing'}; its oldest unfinished subnet is {sched.lo} of {cfg.n}")


# ---- the single-machine launcher's process target ------------------------------------------------------
def _watch_lifeline(conn: Any) -> None:
    """End this process when the launcher goes away (its end of the lifeline pipe closes)."""
    def watch() -> None:
        try:
            conn.recv()
        except (EOFError, OSError):
            pass
        os._exit(70)

    threading.Thread(target=watch, daemon=True, name="naspipe-lifeline").start()


def fresh_process() -> None:
    """At the start of a stage process: torch._dynamo imported as a start-up import (``naspipe.lifecycle.startup``; the
    stage's optimizers import it: a fork server's stage has it already, a torchrun rank or a spawned stage not),
    and every object it inherited (torch, torch._dynamo and naspipe, imported by the fork server, the rank or the
    spawned interpreter) moved to the garbage collector's permanent generation. Those are not garbage; without
    this the collection at the end of ``run_stage`` (and every full collection during the run) walked all of
    them: about half of a short stage's CPU. Objects made by the run are collected as before."""
    import_at_start("torch._dynamo")
    gc.freeze()


def spawn_entry(rank: int, world: int, cfg: TrainConfig, addr: str, port: int, conn: Any, lifeline: Any) -> None:
    """Process target: set threads first, rendezvous on ``addr:port``, run, report back through ``conn``."""
    torch.set_num_threads(cfg.threads)
    fresh_process()
    _watch_lifeline(lifeline)
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))

    def report(*msg: Any) -> None:
        conn.send(msg)

    try:
        run_stage(rank, world, cfg, report, local_rank=rank)
        conn.send(("done", rank))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the launcher
        text = disk_full_message(cfg.out, e) if is_disk_full(e) else failure_line(e)
        try:  # the report first: on a full disk the error file below cannot be written
            conn.send(("error", rank, text, time.time(), is_root_cause(e)))
        except Exception:  # noqa: BLE001
            pass
        try:  # the one-line cause first, then the traceback (a transport error's holds pages of gloo's own)
            write_text_atomic(cfg.out / f"error-stage{rank}.txt", f"{text}\n\n{traceback.format_exc()}")
        except Exception:  # noqa: BLE001
            pass
        sys.stderr.flush()
        os._exit(1)
    _leave(conn)


def _leave(conn: Any) -> None:
    """End the stage process now that its results are written and reported: a non-daemon thread that user code
    started (which Python's exit would wait for) must not keep a finished stage alive."""
    conn.close()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)
