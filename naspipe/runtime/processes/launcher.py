"""The single-machine launcher: one process per stage, supervised, with a progress bar.

Why it exists: a pipeline run is P cooperating processes, and a research run that hangs or leaves
orphans is worse than none. The launcher

* validates everything first (``TrainConfig.validate``, the model, built block by block and probed, the output
  directory, an explicit port), so a bad run starts no process;
* holds the run folder's lock (``naspipe.runfolder.runlock``) from before it prepares the folder until the last file is
  written, so a second run into the folder is refused instead of interleaved;
* starts the stages with ``torch.multiprocessing``. The default start method is ``forkserver``: a clean
  server process (never touched by CUDA or the caller's threads) imports torch and the worker once, and
  every stage is forked from it, which makes the second and later runs of a session start in ~0.1 s
  instead of P parallel torch imports. ``start_method="spawn"`` is the plain alternative (its sentinels fire a
  moment before the exit status is readable, so the supervisor waits for the status: ``_reap``);
* rendezvouses them on 127.0.0.1 and a free port (``env://``, gloo on CPU, NCCL on CUDA);
* supervises: every stage reports ready / progress / done / error through its own pipe, and
  ``multiprocessing.connection.wait`` wakes on those messages *and* on any process exit. If a stage dies
  (exception, signal, nonzero exit) the launcher stops the others (SIGTERM, then SIGKILL) within seconds
  and raises ``TrainError`` naming the rank and the reason; outputs so far are kept and ``status.json``
  says the run is incomplete (with the newest complete checkpoint, if any: ``--resume OUT`` continues).
  Each stage also holds a lifeline pipe and exits if the launcher disappears;
* merges the stages' part files into the run's outputs (``naspipe.runtime.outputs``) once every stage
  reported done: a stage leaves with ``os._exit`` then, and one that a stray user thread keeps alive is stopped
  after ``EXIT_GRACE_S`` (at most ``--timeout``), never failing a finished run. SIGTERM ends a run as Ctrl-C
  does, and a second signal waits until ``status.json`` is written (``naspipe.runtime.processes.signals``).
"""

from __future__ import annotations

import contextlib
import signal
import time
from multiprocessing.connection import wait as mp_wait
from typing import Any

from naspipe.lifecycle import kernels
from naspipe.lifecycle.mainless import start as start_without_main
from naspipe.runtime import checkpoint
from naspipe.runtime.config import ConfigError, TrainConfig
from naspipe.runtime.outputs import MergeError, RunResult, merge_failed, merge_outputs, write_status
from naspipe.runtime.preparation import prepare
from naspipe.runtime.processes.signals import Terminated, deferred, start_fork_server_deaf_to_ctrl_c, terminate_raises
from naspipe.runtime.transport.ports import free_port, port_free

HOST = "127.0.0.1"
KILL_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
FAILURE_GRACE_S = 0.5  # after a first failure, collect the other stages' reports this long
REAP_S = 5.0  # a stage whose pipes closed reports its exit status within this long
EXIT_GRACE_S = 5.0  # after every stage reported done, the longest wait for them to exit (at most --timeout)
STALL_MARGIN_S = 5.0  # past --timeout without a word from any stage: the run is stopped


class TrainError(RuntimeError):
    """A training run failed; ``rank`` is the stage held responsible (None when unknown); ``checkpoint``: the
    newest complete checkpoint (None when none), and then ``base``: the message without the resume hint."""

    def __init__(self, message: str, rank: int | None = None):
        super().__init__(message)
        self.rank = rank
        self.checkpoint: int | None = None
        self.base = message


def process_context(method: str, kind: str | None = None) -> Any:
    """torch.multiprocessing's context for ``method`` (spawn where the platform has no fork server); the fork
    server loads torch, torch._dynamo and the stage worker once (``server_preload``), for every process it starts
    (tests use it too). ``kind``: the CPU kernels its processes compute with (``naspipe.lifecycle.kernels``;
    None: as this process's environment says). A fork server passes its own environment on, so one started under
    another kind is stopped first, and the new one starts under ``kind``; start processes inside
    ``kernels.launching(kind)`` (spawned ones take the environment at their start)."""
    import torch.multiprocessing as tmp

    if method not in tmp.get_all_start_methods():  # e.g. no fork server on Windows
        method = "spawn"
    ctx = tmp.get_context(method)
    if method == "forkserver":  # torch._dynamo is imported by the first torch.optim optimizer: once, in the server
        ctx.set_forkserver_preload(["naspipe.runtime.processes.server_preload"])
        with kernels.launching(kind) if kind is not None else contextlib.nullcontext():
            _fork_server_under(kernels.recipe_kind())
            start_fork_server_deaf_to_ctrl_c()
    return ctx


_server_kernels: list[str | None] = [None]  # the kernels kind of this process's fork server (None: none started)


def _fork_server_under(kind: str | None) -> None:
    """Stop this process's fork server when it was started under another kernels kind than ``kind``; record the
    kind of the one that starts next (now, or at the first process started)."""
    import multiprocessing.forkserver as fs

    running = getattr(fs._forkserver, "_forkserver_pid", None) is not None  # noqa: SLF001 - no public query
    if running and _server_kernels[0] != kind:
        fs._forkserver._stop()  # noqa: SLF001 - Python has no public way to restart it
    _server_kernels[0] = kind


last_behaviour: dict[str, Any] = {}  # what the last ``take_behaviour`` measured (its cost: tests print it)


def take_behaviour(config: TrainConfig) -> TrainConfig:
    """``config`` with the digest of what its supernet computes (``naspipe.preflight.behaviour``), taken in a
    process forked from the run's fork server (under the run's kernels, torch loaded: a fraction of a second;
    spawned where there is none). ConfigError (one line) when a block's initial weights there differ from the
    probe's here (per-process state, named by its block) or the supernet fails there."""
    if config.behaviour_sha256 is not None:
        return config
    from naspipe.preflight.behaviour import BehaviourError, in_child, weights_differ

    here = (getattr(config.space.model, "digests", None) or {}).get("weights_sha256")
    t0 = time.perf_counter()
    ctx = process_context(config.start_method, config.kernels)
    try:
        got = in_child(ctx, config.space, config.kernels, weights=bool(here))
    except BehaviourError as e:
        raise ConfigError(str(e)) from None
    why = weights_differ(config.space, here, got["weights_sha256"])
    if why is not None:
        raise ConfigError(why)
    last_behaviour.clear()
    last_behaviour.update(got, total_s=time.perf_counter() - t0)
    return config.replace(behaviour_sha256=got["behaviour_sha256"])


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code == 0:  # (only asked of a stage that had not reported done)
        return "exited with code 0 before it finished its work (e.g. os._exit(0) in user code)"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class _Stage:
    def __init__(self, rank: int, proc: Any, conn: Any, lifeline: Any):
        self.rank, self.proc, self.conn, self.lifeline = rank, proc, conn, lifeline
        self.error: tuple[str, float, bool] | None = None  # (text, time, primary)
        self.done = False
        self.ready = False
        self.exited_at: float | None = None
        self.label = f"stage {rank}"  # with replicas: "stage S replica R"


def train(config: TrainConfig) -> RunResult:
    """Run ``config`` on one process per stage and return the merged result; raises TrainError on failure.

    SIGTERM (in the main thread) ends the run as Ctrl-C does: ``Terminated`` is raised after ``status.json``
    is written; either exception carries ``checkpoint`` (the newest complete one, or None) for a resume hint.
    """
    with terminate_raises():
        return _train(config)


def _train(config: TrainConfig) -> RunResult:
    config = prepare(config)  # (once per run: a config already prepared is taken as it is)
    port = config.port
    if port is not None and not port_free(port, HOST):
        raise ConfigError(f"port {port} on {HOST} is already in use; choose another --port or leave it out")
    from naspipe.runfolder.runlock import RunLocked, acquire, release

    try:  # the folder is this run's until its last file is written (a second writer gets ConfigError)
        lock = acquire(config.out)
    except RunLocked as e:
        raise ConfigError(str(e)) from None
    try:
        return _run(config, port)
    finally:
        release(config.out, lock)


def _run(config: TrainConfig, port: int | None) -> RunResult:
    """``train`` once the configuration is checked and the run folder locked."""
    config = take_behaviour(config)  # before the resume check: a checkpoint of another behaviour is refused
    checkpoint.verify_resume(config)  # a resumed run: its checkpoint is still there and intact
    checkpoint.prepare_run_dir(config)
    t_start = time.perf_counter()
    ctx = process_context(config.start_method, config.kernels)
    port = port or free_port(HOST)
    stages: list[_Stage] = []
    bar = _bar(config)
    try:
        from naspipe.runtime.processes.worker import spawn_entry

        for rank in range(config.world):  # stages x replicas (replica r of stage s: rank r * stages + s)
            recv_end, send_end = ctx.Pipe(duplex=False)
            life_read, life_write = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=spawn_entry, name=f"naspipe-stage{rank}", daemon=True,
                               args=(rank, config.world, config, HOST, port, send_end, life_read))
            with kernels.launching(config.kernels):  # (spawned stages take the environment at their start)
                start_without_main(proc)  # a script without a main guard, or on stdin, is not run again in it
            send_end.close()
            life_read.close()
            stages.append(_Stage(rank, proc, recv_end, life_write))
            if config.replicas > 1:
                stages[-1].label = f"stage {rank % config.stages} replica {rank // config.stages}"
        startup = _supervise(config, stages, bar, t_start)
    except BaseException as e:
        with deferred():  # a second Ctrl-C (or SIGTERM) waits until status.json says how the run ended
            _stop(stages)
            msg = str(e) if isinstance(e, TrainError) else _interrupted(e) or f"{type(e).__name__}: {e}"
            saved = checkpoint.finalize(config.out, config.keep_checkpoints) if config.checkpoint_every else None
            if saved is not None and isinstance(e, TrainError):
                e.base = str(e)
                e.args = (f"{e}; {resume_hint(saved, config.out)}",)
            if isinstance(e, TrainError | KeyboardInterrupt | Terminated):
                e.checkpoint = saved  # type: ignore[union-attr]
            write_status(config.out, False, msg, getattr(e, "rank", None), checkpoint=saved)
        raise
    finally:
        if bar is not None:
            bar.close()
    _stop(stages)
    if config.checkpoint_every:
        checkpoint.finalize(config.out, config.keep_checkpoints)
    try:
        return merge_outputs(config, wall_s=time.perf_counter() - t_start, startup_s=startup)
    except MergeError as e:  # one line: the stages finished, and what they left is kept
        msg = merge_failed(config.out, e)
        write_status(config.out, False, msg)
        raise TrainError(msg) from None
    except OSError as e:  # a full disk (or a vanished folder) while merging: one line, the parts are kept
        from naspipe.fileio.atomic import disk_full_message, is_disk_full

        msg = disk_full_message(config.out, e) if is_disk_full(e) else f"cannot write the run's outputs: {e}"
        write_status(config.out, False, msg)
        raise TrainError(msg) from None


def resume_hint(saved: int, out: Any, command: str | None = None) -> str:
    """What a failed or stopped run with checkpoints tells the user (``command``: the command line to run, when
    the caller knows it; else "the same command with --resume OUT")."""
    how = command or f"the same command with --resume {out}"
    return f"the last complete checkpoint is at subnet {saved}: to continue, run {how}"


def _interrupted(e: BaseException) -> str | None:
    if isinstance(e, Terminated):
        return "terminated by SIGTERM"
    if isinstance(e, KeyboardInterrupt):
        return "interrupted (SIGINT)"
    return None


def _bar(cfg: TrainConfig) -> Any:
    if not cfg.progress:
        return None
    from naspipe.runtime.progress import for_config

    return for_config(cfg)  # from a resumed run's checkpoint to the total


def _supervise(cfg: TrainConfig, stages: list[_Stage], bar: Any, t_start: float) -> float | None:
    """Until every stage is done: route messages, watch exits; raise TrainError on the first failure."""
    conns = {s.conn: s for s in stages}
    sentinels = {s.proc.sentinel: s for s in stages}
    startup: float | None = None
    last_news = time.monotonic()
    done_at: float | None = None
    while not all(s.done and s.exited_at is not None for s in stages):
        ready = mp_wait(list(conns) + list(sentinels), timeout=1.0)
        now = time.monotonic()
        for obj in ready:
            if obj in conns:
                s = conns[obj]
                try:
                    msg = obj.recv()
                except (EOFError, OSError):
                    del conns[obj]
                    continue
                last_news = now
                startup = _handle(msg, s, stages, bar, t_start, startup)
            else:
                s = sentinels.pop(obj)
                _reap(s.proc)
                s.exited_at = now
                _drain(s, conns, stages, bar, t_start)
                if not s.done:  # (a stage that reported done wrote its results: how it exits is no failure)
                    _fail(stages, conns, bar, t_start)
        if any(s.error for s in stages):
            _fail(stages, conns, bar, t_start)
        if all(s.done for s in stages):  # finished; a stage a stray thread keeps alive does not hold the run
            done_at = done_at or now
            if now - done_at > min(cfg.timeout, EXIT_GRACE_S):
                break  # (the caller stops it and merges)
        elif now - last_news > (limit := _stall_limit(cfg, all(s.ready for s in stages))):
            raise TrainError(f"no stage reported anything for {limit:g} s (--timeout {cfg.timeout:g}); stopped the run")
    return startup


def _stall_limit(cfg: TrainConfig, started: bool) -> float:
    """How long the launcher waits without a word from any stage: ``--timeout`` (each stage gives up waiting
    after it and reports that first) and a margin; before every stage is ready, the process group's rendezvous
    timeout (``naspipe.runtime.processes.worker``: twice ``--timeout``, at least 60 s: stages import and build)."""
    return cfg.timeout + STALL_MARGIN_S if started else max(2 * cfg.timeout, 60.0) + STALL_MARGIN_S


def _reap(proc: Any) -> None:
    """Wait (at most ``REAP_S``) for the exit status of a stage whose sentinel fired.

    Under ``spawn`` the sentinel is a pipe the child closes as it exits, a moment before the kernel can
    report its status: ``join(0)`` would read ``exitcode`` as None and a clean exit would look like a failure.
    """
    proc.join(REAP_S)


def _handle(msg: tuple, s: _Stage, stages: list[_Stage], bar: Any, t_start: float,
            startup: float | None) -> float | None:
    kind = msg[0]
    if kind == "ready":
        s.ready = True
        if startup is None and all(x.ready for x in stages):
            startup = time.perf_counter() - t_start
    elif kind == "progress":
        if s.rank == 0 and bar is not None:
            bar.advance(msg[2])
    elif kind == "done":
        s.done = True
    elif kind == "error":
        s.error = (msg[2], msg[3], bool(msg[4]))
    return startup


def _drain(s: _Stage, conns: dict, stages: list[_Stage], bar: Any, t_start: float) -> None:
    """Read what an exited stage sent before it went."""
    while s.conn in conns and s.conn.poll():
        try:
            _handle(s.conn.recv(), s, stages, bar, t_start, 0.0)
        except (EOFError, OSError):
            del conns[s.conn]


def _fail(stages: list[_Stage], conns: dict, bar: Any, t_start: float) -> None:
    """Collect reports briefly, name the stage responsible, and raise TrainError (the caller stops all)."""
    deadline = time.monotonic() + FAILURE_GRACE_S
    while time.monotonic() < deadline:
        ready = mp_wait(list(conns), timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        for c in ready:
            try:
                _handle(c.recv(), conns[c], stages, bar, t_start, 0.0)
            except (EOFError, OSError):
                del conns[c]
    for s in stages:
        if s.exited_at is None and s.proc.exitcode is not None:
            s.exited_at = time.monotonic()
    # 1. a stage that died without a word (signal, os._exit) is the cause; 2. the earliest primary error;
    # 3. the earliest error of any kind (a lost peer, a transport failure).
    silent = [s for s in stages if s.error is None and s.proc.exitcode is not None and not s.done]
    stopped = [s for s in stages if s.proc.exitcode is None and _is_stopped(s.proc.pid)]
    if silent:
        s = min(silent, key=lambda x: x.exited_at or 0.0)
        reason = _describe_exit(s.proc.exitcode)
    elif stopped:  # its peers timed out waiting for it: they report errors, but it is the cause
        s = stopped[0]
        reason = "was stopped (e.g. SIGSTOP) and did not answer"
    else:
        errs = [s for s in stages if s.error is not None]
        prim = [s for s in errs if s.error[2]] or errs
        if not prim:
            s = next((x for x in stages if x.proc.exitcode not in (None, 0)), stages[0])
            reason = _describe_exit(s.proc.exitcode)
        else:
            s = min(prim, key=lambda x: x.error[1])
            reason = f"failed: {s.error[0]}"
    others = [x.rank for x in stages if x is not s and x.error is not None]
    tail = f" (stages {others} reported errors after it)" if others else ""
    if others and s.label != f"stage {s.rank}":  # replicas: name them
        tail = f" ({', '.join(x.label for x in stages if x is not s and x.error is not None)} reported errors after it)"
    raise TrainError(f"{s.label} (rank {s.rank}, pid {s.proc.pid}) {reason}; stopped the other stages{tail}",
                     s.rank)


def _is_stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped by a signal (Linux ``/proc``; False where that cannot be read)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] in (["T"], ["t"])


def _stop(stages: list[_Stage]) -> None:
    """Terminate every live stage (SIGTERM, then SIGKILL) and reap them all; close the pipes."""
    for s in stages:
        if s.proc.is_alive():
            s.proc.terminate()
    deadline = time.monotonic() + KILL_GRACE_S
    for s in stages:
        s.proc.join(max(0.0, deadline - time.monotonic()))
    for s in stages:
        if s.proc.is_alive():
            s.proc.kill()
            s.proc.join(5.0)
    for s in stages:
        for c in (s.conn, s.lifeline):
            try:
                c.close()
            except OSError:
                pass
