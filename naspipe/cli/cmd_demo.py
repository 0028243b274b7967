"""``naspipe demo``: the main job of ``make demo``: CSP training, checked against the sequential oracle.

Trains a supernet with CSP on several stage processes (live progress bar), trains the same sequence
with the ``sequential`` policy through the same runtime (the throughput baseline) and with the
independent sequential reference trainer (the oracle), verifies the CSP run bit for bit, and prints a
summary table, CSP's speed-up over sequential, the verdict and where to look next (``--json``: one JSON
object instead). The CSP run's Gantt chart, an HTML report and ``summary.json`` land next to its trace, in the
folder its ``run.json`` marks as a naspipe run: the demo writes nothing loose in ``--out`` (where it once
overwrote a user's ``summary.json``), and refuses, before any process starts, a file of those names that is
not its own (``_check_demo_files``).

No step of the demo reads trained weights (verification compares SHA-256 hashes of the parameters,
``params.json``), so neither run writes ``weights-stage*.pt``: with sparse-mlp they are 113 MB a stage, and
the default demo wrote 461 MB with them, 11 MB without (measured with ``du -sh runs/demo``).

The defaults are chosen so the first run shows the point on the machine it runs on: no more stage
processes than the cores found (more processes than cores measure contention, not the schedule), and
``sparse-mlp``: 32 candidates per block, so a subnet seldom waits for an earlier one's write, and tasks of
about 3.5 ms on this project's 2-core machine (2.2 ms forward, 4.9 ms backward), long enough that scheduling
and messages are a few percent of compute: CSP 1.59x sequential there, 2 stages, 200 subnets, idle machine.
``digits-cnn`` (6 candidates per block, tasks of 1.7 ms) measured 0.99x: its subnets wait on each other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from naspipe.cli.common import add_kernels_argument, named, positive_int
from naspipe.errors import UserError

COMMAND = "demo"
HELP = "train a CSP supernet on the embedded default data, verify it against the reference, summarise"
ORDER = 5


DEFAULT_SPACE = "sparse-mlp"
MAX_DEFAULT_STAGES = 4


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def default_stages() -> int:
    """One stage process per core found, at most ``MAX_DEFAULT_STAGES``."""
    return max(1, min(MAX_DEFAULT_STAGES, usable_cores()))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--space", default=DEFAULT_SPACE, help="trainable preset or JSON file (default %(default)s)")
    p.add_argument("--stages", type=positive_int("--stages"), default=None,
                   help=f"pipeline stages (default: the cores found, at most {MAX_DEFAULT_STAGES}; here "
                        f"{default_stages()})")
    p.add_argument("--subnets", type=positive_int("--subnets"), default=200,
                   help="subnets to train (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=named("--out"), default="runs/demo",
                   help="directory for the three runs (default %(default)s)")
    add_kernels_argument(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (speedup, identical, rates, paths) instead of the table")


def _row(name: str, m: dict[str, Any], base: float, verdict: str) -> list[str]:
    rate = m["subnets_per_s"]
    return [name, f"{rate:8.2f}", f"{rate / base:5.2f}x" if base else "-", f"{m.get('utilization', 0):.2f}", verdict]


def _table(rows: list[list[str]]) -> str:
    head = ["run", "subnets/s", "vs seq", "util", "reproducible (vs reference)"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return None


def _mean_task_ms(trace: Any) -> float:
    ev = trace.compute_events()
    return 1e3 * sum(e.duration for e in ev) / len(ev) if ev else 0.0


# the demo's three runs: subfolder of --out and the kind of run it writes there
RUNS = (("csp", "train"), ("sequential", "train"), ("reference", "reference"))
# what the demo writes besides the runs, all in the CSP run's folder (which its run.json marks as a naspipe run):
# never loose in --out, where a user's file of that name would be overwritten
SUMMARY, GANTT, REPORT = "summary.json", "gantt.html", "report.html"
DEMO_FILES = (SUMMARY, GANTT, REPORT)


def _check_outs(out: Path) -> None:
    """Refuse (one line) when a subfolder of ``out`` holds anything but an earlier demo run of the kind the demo
    writes there: the demo replaces its own runs only (a user's other files there are kept)."""
    from naspipe.runfolder import runs
    from naspipe.runtime.config import check_out_dir

    for sub, kind in RUNS:
        d = out / sub
        owner, held = runs.kind_of(d), runs.held_file(d)
        if held is not None and owner != kind:
            what = f"a {owner} run" if owner else f"{held}, which no naspipe run wrote there"
            raise UserError(f"{str(d)!r} holds {what}; naspipe demo writes a {kind} run there and replaces only "
                             "its own: choose another --out")
        check_out_dir(d, overwrite=True, kind=kind)
    _check_demo_files(out / "csp")


def _check_demo_files(d: Path) -> None:
    """Refuse (one line) a file of a name the demo writes in ``d`` (``DEMO_FILES``) that is not its own: one in a
    folder no ``run.json`` marks as a train run (an earlier demo's CSP run), a symbolic link (never followed), or
    not a plain file."""
    from naspipe.runfolder import runs

    ours = runs.kind_of(d) == "train"
    for name in DEMO_FILES:
        p = d / name
        if not os.path.lexists(p):
            continue
        if p.is_symlink():
            why = f"is a symbolic link (to {os.readlink(p)!r}), which naspipe demo neither follows nor replaces"
        elif not p.is_file():
            why = f"is not a plain file, where naspipe demo writes its {name}"
        elif not ours:
            why = f"is a file which naspipe demo did not write (no {runs.RUN_JSON} marks {str(d)!r} as its run)"
        else:
            continue
        raise UserError(f"{str(p)!r} {why}; move it out of {str(d)!r} or choose another --out")


def _save_reference(ref: Any, d: Path) -> Path:
    """Replace the reference run in ``d`` with ``ref`` (under the folder's lock; only the run's own files)."""
    from naspipe.runtime.rundir import save_reference_run

    return save_reference_run(d, lambda folder: ref.save(folder, metrics={}))


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    stages = args.stages if args.stages is not None else default_stages()
    csp_cfg, seq_cfg = _configs(args, out, stages)
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runtime.processes.launcher import TrainError, train  # (naspipe.runtime.train: its hint is for Python)

    cores, load = _say_setting(args, csp_cfg, out, stages)
    try:  # (a ConfigError, e.g. another run holds one of the folders, is a refusal: exit code 2)
        _say("[1/3] CSP, one process per stage")
        csp = train(csp_cfg)
        _say("[2/3] the sequential policy through the same runtime (throughput baseline)")
        seq = train(seq_cfg)
    except TrainError as e:
        print(f"naspipe: error: {e}", file=sys.stderr)
        return 1
    _say("[3/3] the independent sequential reference trainer (the oracle)")
    ref = train_reference(csp_cfg.space, csp_cfg.stream(), args.seed, csp_cfg.shared, progress=True)
    ref_dir = _save_reference(ref, out / "reference")
    summary, rows, facts = _summarise(args, csp_cfg, seq_cfg, stages, cores, load, csp, seq, ref, ref_dir)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary, rows, facts, stages)
    return 0 if summary["identical"] else 1


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _configs(args: argparse.Namespace, out: Path, stages: int) -> tuple[Any, Any]:
    """The CSP and sequential runs' configurations, every check made; a UserError (one line) if one fails."""
    from naspipe.lifecycle import kernels
    from naspipe.runtime import TrainConfig
    from naspipe.runtime.preparation import prepare

    # frozen: the demo shows the schedule's speed-up on a preset, as the README's numbers were measured
    # (serial, the default for a user's supernet, trains the fixed blocks but serialises their stages)
    csp_cfg = TrainConfig.create(args.space, out / "csp", stages=stages, subnets=args.subnets,
                                 seed=args.seed, policy="csp", overwrite=True, save_weights=False,
                                 shared_layers="frozen", kernels=args.kernels)
    seq_cfg = prepare(csp_cfg.replace(out=out / "sequential", policy="sequential"))  # (create prepared csp_cfg)
    _check_outs(out)
    kernels.require(args.kernels, "the demo's reference")  # the reference trains in this process: its kernels
    return csp_cfg, seq_cfg


def _say_setting(args: argparse.Namespace, csp_cfg: Any, out: Path, stages: int) -> tuple[int, float | None]:
    """What the demo runs, and notes on what lowers the speed-up it shows: ``(cores, load average)``."""
    from naspipe.spaces.shared import short_list

    cores = usable_cores()
    _say(f"naspipe demo: {args.subnets} subnets of {csp_cfg.space.name} on {stages} stage processes "
         f"({cores} cores found) -> {out}/")
    if stages > cores:
        _say(f"note: {stages} stage processes share {cores} cores: the speed-up measures contention too")
    load = _load_average()
    if load is not None and load > 0.5 * cores:
        _say(f"note: the machine is busy (load average {load:.1f} on {cores} cores): the stage processes compete "
             "with other work, so the speed-up shown is lower than on an idle machine")
    fixed = [b.name for b in csp_cfg.space.blocks if b.fixed]
    if fixed:  # once, and what a demo user can do about it (the demo itself takes no --shared-layers)
        _say(f"note: the shared layers ({short_list(fixed)}) stay frozen in both runs, as the README's speed-ups "
             "were measured; `naspipe train --shared-layers serial` trains them")
    return cores, load


def _summarise(args: argparse.Namespace, csp_cfg: Any, seq_cfg: Any, stages: int, cores: int, load: float | None,
               csp: Any, seq: Any, ref: Any, ref_dir: Path) -> tuple[dict[str, Any], list[list[str]], dict[str, Any]]:
    """Verify both runs, write the Gantt chart, the report and ``summary.json``: ``(summary, table rows, what
    the text says besides)``."""
    from naspipe.fileio.atomic import write_text_atomic
    from naspipe.viz import gantt
    from naspipe.viz.report import write_report

    ok_csp, msg_csp = csp.verify(ref_dir)
    ok_seq, msg_seq = seq.verify(ref_dir)
    fig = gantt(csp.trace, title=f"CSP on {csp_cfg.space.name}, {stages} stages")
    gantt_path = csp_cfg.out / GANTT
    fig.write_html(gantt_path, include_plotlyjs=True)
    report_path = write_report(csp_cfg.out, csp_cfg.out / REPORT, reference=ref_dir)
    summary_path = csp_cfg.out / SUMMARY
    base = seq.metrics["subnets_per_s"]
    speedup = csp.metrics["subnets_per_s"] / base if base else 0.0
    identical = ok_csp and ok_seq
    losses = [ref.losses[j] for j in sorted(ref.losses)]
    k = max(1, len(losses) // 10)
    summary = {
        "space": csp_cfg.space.name, "stages": stages, "cores": cores, "load_average": load,
        "subnets": args.subnets,
        "speedup": round(speedup, 4), "identical": identical,
        "csp_subnets_per_s": csp.metrics["subnets_per_s"], "sequential_subnets_per_s": base,
        "csp_utilization": csp.metrics["utilization"], "mean_task_ms": round(_mean_task_ms(csp.trace), 4),
        "verify": msg_csp if ok_csp else f"csp: {msg_csp}; sequential: {msg_seq}",
        "loss_first": sum(losses[:k]) / k, "loss_last": sum(losses[-k:]) / k,
        "runs": {"csp": str(csp_cfg.out), "sequential": str(seq_cfg.out), "reference": str(ref_dir)},
        "report": str(report_path), "gantt": str(gantt_path), "summary": str(summary_path),
        "reproducible": identical,  # the name older summary.json readers know
    }
    write_text_atomic(summary_path, json.dumps(summary, indent=1))
    rows = [_row("csp", csp.metrics, base, "identical" if ok_csp else "DIFFERS"),
            _row("sequential", seq.metrics, base, "identical" if ok_seq else "DIFFERS")]
    return summary, rows, {"k": k, "ok_csp": ok_csp, "msg_csp": msg_csp, "speedup": speedup}


def _print_summary(summary: dict[str, Any], rows: list[list[str]], facts: dict[str, Any], stages: int) -> None:
    """The table, the verdict and where to look next."""
    k, ok_csp = facts["k"], facts["ok_csp"]
    print()
    print(_table(rows))
    print(f"\nCSP trains {facts['speedup']:.2f}x the subnets/s of the sequential policy on {stages} stage processes "
          f"(mean task {summary['mean_task_ms']:.2f} ms), and its weights are "
          + ("bit-identical to the sequential reference." if ok_csp else "NOT identical to the reference."))
    print(f"mean training loss: first {k} subnets {summary['loss_first']:.3f}, last {k} {summary['loss_last']:.3f}")
    print(f"verify csp vs reference: {facts['msg_csp']}")
    print("\nwhere to look next:")
    print(f"  report (open in a browser): {summary['report']}")
    print(f"  Gantt chart:                {summary['gantt']}")
    print(f"  summary (JSON):             {summary['summary']}")
    print(f"  same check by hand:         naspipe verify {summary['runs']['csp']} {summary['runs']['reference']}")
    print("  notebooks:                  make lab   (then notebooks/01_quickstart.ipynb)")
