"""``naspipe demo``: the main job of ``make demo``: CSP training, checked against the sequential oracle.

Trains a supernet with CSP on several stage processes (live progress bar), trains the same sequence
with the ``sequential`` policy through the same runtime (the throughput baseline) and with the
independent sequential reference trainer (the oracle), verifies the CSP run bit for bit, and prints a
summary table. The CSP run's Gantt chart and an HTML report land next to its trace.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from naspipe.cli.common import UsageError, positive_int

COMMAND = "demo"
HELP = "train a CSP supernet on the embedded default data, verify it against the reference, summarise"
ORDER = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--space", default="digits-cnn", help="trainable preset or JSON file (default %(default)s)")
    p.add_argument("--stages", type=positive_int("--stages"), default=4, help="pipeline stages (default %(default)s)")
    p.add_argument("--subnets", type=positive_int("--subnets"), default=200,
                   help="subnets to train (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/demo", help="directory for the three runs (default %(default)s)")


def _row(name: str, m: dict[str, Any], base: float, verdict: str) -> list[str]:
    rate = m["subnets_per_s"]
    return [name, f"{rate:8.2f}", f"{rate / base:5.2f}x" if base else "-", f"{m.get('utilization', 0):.2f}", verdict]


def _table(rows: list[list[str]]) -> str:
    head = ["run", "subnets/s", "vs seq", "util", "reproducible (vs reference)"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def run(args: argparse.Namespace) -> int:
    from naspipe.runtime import ConfigError, TrainConfig

    out = Path(args.out)
    try:
        csp_cfg = TrainConfig.create(args.space, out / "csp", stages=args.stages, subnets=args.subnets,
                                     seed=args.seed, policy="csp", overwrite=True)
        seq_cfg = csp_cfg.replace(out=out / "sequential", policy="sequential")
    except ConfigError as e:
        raise UsageError(str(e)) from None
    from naspipe.models import model_kind

    try:
        model_kind(csp_cfg.space)
    except ValueError as e:
        raise UsageError(str(e)) from None

    from naspipe.reference import train_reference
    from naspipe.runtime import TrainError, train
    from naspipe.viz import gantt
    from naspipe.viz.report import write_report

    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    say(f"naspipe demo: {args.subnets} subnets of {csp_cfg.space.name} on {args.stages} stages -> {out}/")
    try:
        say("[1/3] CSP, one process per stage")
        csp = train(csp_cfg)
        say("[2/3] the sequential policy through the same runtime (throughput baseline)")
        seq = train(seq_cfg)
    except TrainError as e:
        print(f"naspipe: error: {e}", file=sys.stderr)
        return 1
    say("[3/3] the independent sequential reference trainer (the oracle)")
    ref = train_reference(csp_cfg.space, csp_cfg.stream(), args.seed, csp_cfg.shared, progress=True)
    ref_dir = ref.save(out / "reference", metrics={})

    ok_csp, msg_csp = csp.verify(ref_dir)
    ok_seq, msg_seq = seq.verify(ref_dir)
    fig = gantt(csp.trace, title=f"CSP on {csp_cfg.space.name}, {args.stages} stages")
    gantt_path = csp_cfg.out / "gantt.html"
    fig.write_html(gantt_path, include_plotlyjs=True)
    report_path = write_report(csp_cfg.out)

    base = seq.metrics["subnets_per_s"]
    rows = [_row("csp", csp.metrics, base, "identical" if ok_csp else "DIFFERS"),
            _row("sequential", seq.metrics, base, "identical" if ok_seq else "DIFFERS")]
    print()
    print(_table(rows))
    losses = [ref.losses[j] for j in sorted(ref.losses)]
    k = max(1, len(losses) // 10)
    print(f"\nmean training loss: first {k} subnets {sum(losses[:k]) / k:.3f}, last {k} {sum(losses[-k:]) / k:.3f}")
    print(f"verify csp vs reference: {msg_csp}")
    print(f"Gantt chart: {gantt_path}\nreport: {report_path}")
    (out / "summary.json").write_text(json.dumps({
        "space": csp_cfg.space.name, "stages": args.stages, "subnets": args.subnets,
        "csp_subnets_per_s": csp.metrics["subnets_per_s"], "sequential_subnets_per_s": base,
        "csp_utilization": csp.metrics["utilization"], "reproducible": ok_csp and ok_seq}, indent=1))
    return 0 if ok_csp and ok_seq else 1
