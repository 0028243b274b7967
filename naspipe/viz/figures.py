"""Export the README's pictures: ``python -m naspipe.viz.figures docs/figures`` (or ``make figures``).

A Gantt chart of a simulated CSP run (naspipe-k48, 4 stages, 40 subnets), the same run with the split
backward (``csp-bw``), and the causal DAG of its first 12 subnets. Each picture is written as SVG (always,
by ``naspipe.viz.svg``), as interactive HTML (plotly.js from its CDN, to keep the files small) and as PNG
when plotly can render images (kaleido and a headless browser installed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import plotly.graph_objects as go

from naspipe.partition import partition
from naspipe.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.space import preset
from naspipe.viz.dag import critical_path, dag_figure, dag_from_trace
from naspipe.viz.gantt import gantt
from naspipe.viz.svg import dag_svg, gantt_svg


def export(fig: go.Figure, svg: str, out: Path, stem: str) -> list[Path]:
    """Write ``stem.svg`` and ``stem.html``, and ``stem.png`` when plotly can render images here."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.svg", out / f"{stem}.html"]
    paths[0].write_text(svg)
    fig.write_html(paths[1], include_plotlyjs="cdn")
    try:
        fig.write_image(out / f"{stem}.png", width=1100, height=fig.layout.height or 500, scale=2)
        paths.append(out / f"{stem}.png")
    except Exception:  # noqa: BLE001 - no kaleido / browser: SVG and HTML only
        pass
    return paths


def make_figures(out: str | Path, space: str = "naspipe-k48", stages: int = 4, subnets: int = 40,
                 dag_subnets: int = 12, seed: int = 0) -> list[Path]:
    """Simulate, draw and export; returns the files written."""
    out = Path(out)
    sp = preset(space)
    part = partition(sp, stages)
    stream = UniformStream(sp, seed, subnets)
    written = []
    for policy in ("csp", "csp-bw"):
        trace = simulate(sp, part, stream, policy, seed=seed).trace
        title = (f"{policy} on {space}: {stages} stages, {subnets} subnets, utilisation {trace.utilization():.2f}")
        written += export(gantt(trace, title=title), gantt_svg(trace, title), out, f"gantt_{policy.replace('-', '_')}")
    trace = simulate(sp, part, stream, "csp", seed=seed).trace
    g = dag_from_trace(trace, sp, part, [stream[j] for j in range(dag_subnets)])
    cp = critical_path(g)
    title = f"causal DAG of {dag_subnets} subnets ({space}, {stages} stages): critical path {cp.length * 1e3:.1f} ms"
    written += export(dag_figure(g, title=title), dag_svg(g, title), out, "dag")
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m naspipe.viz.figures OUT_DIR", file=sys.stderr)
        return 2
    for p in make_figures(args[0]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
