"""The torchrun entry point: ``torchrun --nproc-per-node P -m naspipe.torchrun --out DIR [train options]``.

Why it exists: across machines, processes are started by torchrun (or any launcher that sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``), not by ``naspipe train``. Every
process parses the same ``naspipe train`` options and runs the same stage worker (``env://``
rendezvous); ``--stages`` defaults to the world size (divided by ``--replicas``) and stages x replicas must
equal it. Rank 0 prepares ``--out`` before
the rendezvous, shows the progress bar, and after the final barrier merges every stage's part file
into the run's outputs, which therefore needs ``--out`` on a filesystem all machines share.

``--checkpoint-every N`` and ``--resume DIR`` work as in ``naspipe train`` (checkpoint files are written
by each rank into ``OUT/checkpoint/``, so ``--out`` must be shared; rank 0 marks a checkpoint complete).

Before the process group forms, every rank checks its network (its own interface first, before torch is imported,
so its line comes at once) and meets the others at the master's store
(``naspipe.runtime.transport.arrival``): a wrong ``GLOO_SOCKET_IFNAME``, a loopback or unreachable master, or a rank
that does not arrive within ``--connect-timeout`` seconds (default 60) ends every rank with one line naming
the setting. When a neighbour on another host goes away mid-run, ``status.json`` names the lost rank and host.

Exit codes: 0 done, 2 bad arguments or network settings (nothing trained), 1 a stage failed (torchrun stops
the others).
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from naspipe.errors import UserError


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None or not value.isdigit():
        raise UserError(f"environment variable {name} is not set to a whole number: run under torchrun")
    return int(value)


def _config(argv: Sequence[str] | None, world: int, rank: int) -> Any:
    from naspipe.cli.cmd_train import world_config

    return world_config(argv, world, check_out=rank == 0)


class _Bar:
    """Rank 0's report function: stage 0's "progress" reports (subnets it wrote) move the bar."""

    def __init__(self, bar: Any):
        self.bar = bar

    def __call__(self, kind: str, *payload: Any) -> None:
        if kind == "progress":
            self.bar.advance(payload[1])

    def close(self) -> None:
        self.bar.close()


def lost_host(rank: int, e: BaseException, roster: Any, out: Any) -> dict[str, Any] | None:
    """``{"ranks": [...], "host": ...}`` when ``e`` is the loss of a neighbour on another host, else None
    (also when the neighbour recorded an error of its own before it went: it failed, its host was not lost)."""
    peer = _peer(e)
    if roster is None or peer is None or roster.host(peer) == roster.host(rank):
        return None
    if any((out / f"error-stage{peer}.{ext}").exists() for ext in ("json", "txt")):
        return None
    host = roster.host(peer)
    return {"ranks": roster.ranks_on(host), "host": host, "neighbour": peer}


def _peer(e: BaseException) -> int | None:
    """The neighbour an error names (``PeerLost`` from a receive, ``SendFailure`` from a send), also where a
    later error in the stage's cleanup (``destroy_process_group`` with a neighbour gone) replaced it."""
    from naspipe.lifecycle.exception_chain import chain

    return next((peer for x in chain(e) if isinstance(peer := getattr(x, "peer", None), int)), None)


def failure_record(rank: int, e: BaseException) -> dict[str, Any]:
    """What ``error-stage<rank>.json`` holds: the rank, the exception's class name (``kind``), whether the failure
    was the rank's own (``own``; not a SIGTERM from torchrun, a lost neighbour or a broken transport: what another
    rank's failure causes) and the neighbour it lost (``peer``, or None)."""
    from naspipe.runtime.processes.signals import Terminated
    from naspipe.runtime.processes.worker import is_root_cause

    peer = _peer(e)
    own = is_root_cause(e) and not isinstance(e, Terminated) and peer is None
    return {"rank": rank, "kind": type(e).__name__, "own": own, "peer": peer}


def record_failure(cfg: Any, rank: int, e: BaseException, roster: Any = None) -> None:
    """Keep what was written, mark the run incomplete: every rank leaves ``error-stage<rank>.json`` (its
    ``failure_record``), then ``error-stage<rank>.txt`` (the one line, then the traceback); rank 0 writes
    ``status.json`` (naming itself only when its failure is its own) and, with checkpoints, marks the newest
    complete one and says how to resume. A rank that lost a neighbour on another host names that host once
    (``lost-host.json``, written only where none is: the first rank to meet the loss) and writes ``status.json``
    from it (torchrun may stop rank 0 first); rank 0 writes its own status first and then the lost host's where one
    was named, so a lost host named at any moment stands."""
    _write_error_files(cfg.out, rank, e)
    lost = lost_host(rank, e, roster, cfg.out)
    if rank != 0 and lost is None:
        return
    if lost is not None:
        print(f"naspipe: error: rank {rank} lost host {lost['host']} (rank(s) {', '.join(map(str, lost['ranks']))})",
              file=sys.stderr)
    saved = _checkpoint_said(cfg, rank)
    if lost is not None:
        name_lost_host(cfg.out, {"error": f"lost host {lost['host']} (rank(s) {', '.join(map(str, lost['ranks']))}): "
                                          f"rank {rank} saw: {e}", "rank": lost["neighbour"], "checkpoint": saved,
                                 "lost": lost})
    elif lost_host_named(cfg.out) is None:
        _write_rank0_status(cfg, rank, e, saved)
    _status_of_lost_host(cfg.out)  # a lost host named meanwhile (also after rank 0's check) stands


def _write_error_files(out: Any, rank: int, e: BaseException) -> None:
    """The rank's failure record, then its text (one line, then the traceback): the record first, since an error
    text without its record is an older writer's."""
    import json
    import traceback

    from naspipe.fileio.atomic import write_text_atomic
    from naspipe.runtime.processes.worker import failure_line

    try:
        write_text_atomic(out / f"error-stage{rank}.json", json.dumps(failure_record(rank, e)) + "\n")
        text = "".join(traceback.format_exception(e))
        write_text_atomic(out / f"error-stage{rank}.txt", f"{failure_line(e)}\n\n{text}")
    except OSError:
        pass


def _checkpoint_said(cfg: Any, rank: int) -> int | None:
    """The newest complete checkpoint (rank 0 marks it: the single writer of complete.json; another rank reads
    it), with the resume line on stderr; None without checkpoints."""
    if not cfg.checkpoint_every:
        return None
    from naspipe.runtime.checkpoint import finalize, newest_complete, root_of

    saved = finalize(cfg.out, cfg.keep_checkpoints) if rank == 0 else newest_complete(root_of(cfg.out))
    if saved is not None:
        without = " without --fault" if cfg.fault else ""  # (an injected fault would fire again)
        print(f"naspipe: the last complete checkpoint is at subnet {saved}: to continue, run the same command"
              f"{without} with --resume {cfg.out}", file=sys.stderr)
    return saved


def _write_rank0_status(cfg: Any, rank: int, e: BaseException, saved: int | None) -> None:
    """Rank 0's ``status.json`` where no lost host is named: rank 0 is stopped by torchrun's SIGTERM or meets the
    failure first as a broken neighbour (whichever comes first); either way the rank whose failure was its own is
    named, when its record is readable."""
    from naspipe.runtime.outputs import write_status
    from naspipe.runtime.processes.signals import Terminated
    from naspipe.runtime.processes.worker import is_root_cause

    primary = is_root_cause(e) and not isinstance(e, Terminated)
    failed = [] if primary else failed_ranks(cfg.out, rank)
    after = f"after rank(s) {', '.join(map(str, failed))} failed (error-stage<rank>.txt)" if failed else ""
    if isinstance(e, Terminated):
        why = "rank 0 was stopped by SIGTERM " + (
            after or "(torchrun stops every rank when one fails, or the job was cancelled)")
    else:
        why = f"stage 0 (rank 0) failed{' ' + after if after else ''}: {type(e).__name__}: {e}"
    if lost_host_named(cfg.out) is None:
        write_status(cfg.out, False, why, 0 if primary else (failed[0] if failed else None), checkpoint=saved)


def name_lost_host(out: Any, record: dict[str, Any]) -> bool:
    """Write ``lost-host.json`` (``error``, ``rank``, ``checkpoint``, ``lost``) unless a rank named a lost host
    before; returns whether this record stands."""
    import json

    from naspipe.fileio.atomic import write_once_atomic
    from naspipe.runfolder import runs

    try:
        return write_once_atomic(out / runs.LOST_HOST, (json.dumps(record) + "\n").encode())
    except OSError:
        return False


def lost_host_named(out: Any) -> dict[str, Any] | None:
    """The lost host a rank named (``lost-host.json``), or None."""
    from naspipe.fileio import jsonfile
    from naspipe.runfolder import runs

    try:
        data = jsonfile.loads((out / runs.LOST_HOST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("lost"), dict) else None


def _status_of_lost_host(out: Any) -> None:
    """``status.json`` from the lost host named (nothing where none was): every writer writes the same."""
    from naspipe.runtime.outputs import write_status

    if (named := lost_host_named(out)) is not None:
        write_status(out, False, str(named.get("error")), named.get("rank"), checkpoint=named.get("checkpoint"),
                     lost=named["lost"])


def failed_ranks(out: Any, me: int, wait_s: float = 3.0) -> list[int]:
    """The other ranks whose failure was their own, by their records (``error-stage<rank>.json``, the run folder
    is shared; an error text without a record, an older writer's, by its first word). Waits up to ``wait_s`` for
    one to appear, or until a rank has named a lost host: the failing rank's connections can close before its
    report is written (where the run folder is not shared, none ever appears and the failure is not named)."""
    deadline = time.monotonic() + wait_s
    while True:
        ranks = [r for r, own in _failures(out).items() if own and r != me]
        if ranks or time.monotonic() >= deadline or lost_host_named(out) is not None:
            return sorted(ranks)
        time.sleep(0.1)


def _failures(out: Any) -> dict[int, bool]:
    """rank -> whether its failure was its own, for every rank that recorded one."""
    from naspipe.fileio import jsonfile
    from naspipe.runtime.processes.worker import consequence_names

    found: dict[int, bool] = {}
    for p in out.glob("error-stage*.json"):
        try:
            rec = jsonfile.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("rank"), int) and isinstance(rec.get("own"), bool):
            found[rec["rank"]] = rec["own"]
    not_own = None
    for p in out.glob("error-stage*.txt"):
        tail = p.stem.removeprefix("error-stage")
        if not tail.isdigit() or int(tail) in found:
            continue
        try:
            first = p.read_text().partition("\n")[0]
        except OSError:
            continue
        not_own = not_own if not_own is not None else consequence_names() | {"Terminated"}
        found[int(tail)] = first.split(":")[0].split(" ")[0] not in not_own
    return found


def _said_first() -> str | None:
    """This rank's own network mistake (a missing or wrong ``GLOO_SOCKET_IFNAME``, a loopback master), printed at
    once: the check needs no torch, and torchrun stops a rank as soon as a sibling ends, so a rank still importing
    torch when its sibling had told the others would end without its line. Returns the line (None: no mistake,
    or not under a launcher)."""
    rank = os.environ.get("RANK", "")
    if not (rank.isdigit() and os.environ.get("WORLD_SIZE", "").isdigit() and "MASTER_ADDR" in os.environ):
        return None
    from naspipe.runtime.transport.netcheck import NetworkError, own_endpoint

    try:
        own_endpoint(os.environ)
    except NetworkError as e:
        line = f"naspipe: error: rank {int(rank)}: {e}"  # (as meet's line reads: said once)
        print(line, file=sys.stderr, flush=True)
        return line
    except Exception:  # noqa: BLE001 - anything else (a malformed variable) is met where it was before: in meet
        return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """One rank: its arguments checked (exit 2, the others told), the ranks met, its stage run (exit 1 on a
    failure, recorded for rank 0's status), rank 0's summary."""
    said = [line] if (line := _said_first()) is not None else []  # (meet finds the same mistake: not said twice)
    try:
        rank, world, local_rank, cfg, connect_timeout = _prepare(argv)
    except UserError as e:
        return _refused(e)
    import torch

    torch.set_num_threads(cfg.threads)
    roster = _meet(cfg, rank, world, connect_timeout, said)
    if roster is None:
        return 2
    return _run(cfg, rank, world, local_rank, roster)


def _prepare(argv: Sequence[str] | None) -> tuple[int, int, int, Any, float]:
    """``(rank, world, local rank, config, connect timeout)``; rank 0 takes the run folder's lock (until it exits)
    and prepares the folder. A UserError (one line) for what cannot run."""
    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    cfg, connect_timeout = _config(argv, world, rank)
    from naspipe.lifecycle.kernels import enter

    enter(cfg.kernels)  # this rank computes nothing before it (its stage checks it again)
    if rank == 0:
        from naspipe.runfolder.runlock import RunLocked, acquire, release
        from naspipe.runtime.checkpoint import prepare_run_dir, verify_resume

        try:  # a second writer is refused
            atexit.register(release, cfg.out, acquire(cfg.out))
        except RunLocked as e:  # (a RuntimeError: the lock is held, which the user can act on)
            raise UserError(str(e)) from None
        verify_resume(cfg)
        prepare_run_dir(cfg)
    return rank, world, local_rank, cfg, connect_timeout


def _refused(e: UserError) -> int:
    """The refusal's line, told to the other ranks too (they end now, with it); exit 2."""
    print(f"naspipe: error: {e}", file=sys.stderr)
    r, w = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if r.isdigit() and w.isdigit() and "MASTER_ADDR" in os.environ:
        from naspipe.runtime.transport.arrival import tell_others

        tell_others(int(r), int(w), f"rank {r}: {e}")
    return 2


def _meet(cfg: Any, rank: int, world: int, connect_timeout: float, said: list[str]) -> Any:
    """The ranks' roster once all have arrived; None (the line said, rank 0's status written) when they did not."""
    from naspipe.runtime.transport.arrival import meet
    from naspipe.runtime.transport.netcheck import NetworkError

    def say(e: NetworkError) -> None:  # this rank's line before the others are told (torchrun may stop it then)
        if (line := f"naspipe: error: rank {rank}: {e}") not in said:
            print(line, file=sys.stderr, flush=True)
            said.append(line)

    try:
        return meet(rank, world, connect_timeout, say=say)
    except NetworkError as e:
        say(e)
        if rank == 0:
            from naspipe.runtime.outputs import write_status

            write_status(cfg.out, False, f"the ranks did not meet: {e}")
        return None


def _run(cfg: Any, rank: int, world: int, local_rank: int, roster: Any) -> int:
    """This rank's stage, to the end; rank 0 merges the outputs after the last barrier and prints the summary."""
    from naspipe.runtime.outputs import MergeError, merge_failed, merge_outputs
    from naspipe.runtime.processes.signals import Terminated, deferred, terminate_raises
    from naspipe.runtime.processes.worker import failure_line, fresh_process, run_stage
    from naspipe.runtime.progress import for_config

    fresh_process()  # this rank's imports are not garbage: its collections walk only what the run makes
    if rank == 0 and cfg.progress:
        from naspipe.lifecycle import kernels
        from naspipe.spaces.shared import announce

        announce(cfg.space, cfg.shared)
        kernels.announce(cfg.kernels, cfg.optimizer)
    bar = _Bar(for_config(cfg, rank == 0 and cfg.progress))
    t0 = time.perf_counter()
    merged: list[Any] = []

    def merge() -> None:
        if rank == 0:
            try:
                merged.append(merge_outputs(cfg, wall_s=time.perf_counter() - t0))
            except MergeError as e:  # what is true (the stages finished, their parts kept) and what to do
                raise MergeError(merge_failed(cfg.out, e)) from None

    try:  # torchrun stops the other ranks with SIGTERM when one fails: each still records how it ended
        with terminate_raises():
            run_stage(rank, world, cfg, bar, local_rank=local_rank, after_barrier=merge)
    except (Exception, SystemExit, KeyboardInterrupt, Terminated) as e:  # noqa: BLE001 - one line (sys.exit in
        with deferred():  # (user code too); torchrun's SIGTERM, arriving while this rank writes how it ended,
            bar.close()  # waits for it (a Ctrl-C too: the run is ending anyway)
            record_failure(cfg, rank, e, roster)
        print(f"naspipe: error: stage {rank} (rank {rank}) failed: {failure_line(e)}", file=sys.stderr)
        return 1
    bar.close()
    if merged:
        from naspipe.cli.cmd_train import summary_line

        print(summary_line(merged[0].metrics))
        print(f"wrote {cfg.out}")
    return 0

if __name__ == "__main__":
    from naspipe.cli.shutdown import leave_despite_threads
    from naspipe.lifecycle.startup import pause_at_first_import

    pause_at_first_import("torch")  # (for its model's check, after its own network check: naspipe.lifecycle.startup)
    code = main()
    leave_despite_threads(code)  # a non-daemon thread from user code must not keep a finished rank alive
    sys.exit(code)
