"""Export the README's pictures: ``python -m naspipe.experiments.figures [--measured] docs/figures`` (``make figures``).

A Gantt chart of a simulated CSP run (naspipe-k48, 4 stages, 20 subnets), the same run with the split
backward (``csp-bw``), and the causal DAG of its first 12 subnets. With ``--measured`` also a real CSP run
(digits-cnn, 4 stage processes, 16 subnets: about 10 s) drawn above its simulated twin on one time axis
(``gantt_measured_vs_sim``). Each picture is written as SVG (always, by ``naspipe.viz.svg``), as interactive
HTML (plotly.js from its CDN, to keep the files small) and as PNG when plotly can render images (kaleido and
a headless browser installed) or, failing that, when ``rsvg-convert`` (librsvg) can render the SVG.

``simulated_twin`` (``naspipe.sim.twin``) is the simulation of a measured run's sequence with the space's cost
model rescaled so that its mean forward and backward task times match the measured ones.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go

from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.sim.twin import scaled_space, simulated_twin  # re-exported for notebooks
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset
from naspipe.viz.dag import critical_path, dag_figure, dag_from_trace
from naspipe.viz.gantt import gantt
from naspipe.viz.svg import dag_svg, gantt_svg


def export(fig: go.Figure, svg: str, out: Path, stem: str) -> list[Path]:
    """Write ``stem.svg`` and ``stem.html``, and ``stem.png`` when plotly can render images here."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.svg", out / f"{stem}.html"]
    paths[0].write_text(svg)
    fig.write_html(paths[1], include_plotlyjs="cdn")
    png = out / f"{stem}.png"
    try:
        fig.write_image(png, width=1100, height=fig.layout.height or 500, scale=2)
        paths.append(png)
    except Exception:  # noqa: BLE001 - no kaleido / browser: the SVG rendered by rsvg-convert, if installed
        rsvg = shutil.which("rsvg-convert")
        if rsvg and subprocess.run([rsvg, "-b", "white", "-z", "1.5", str(paths[0]), "-o", str(png)],
                                   capture_output=True, timeout=60).returncode == 0:
            paths.append(png)
    return paths


def measured_figures(out: Path, space: str = "digits-cnn", stages: int = 4, subnets: int = 16,
                     seed: int = 0) -> list[Path]:
    """Train a small CSP run for real and export it above its simulated twin (one time axis)."""
    import tempfile

    from naspipe.runtime import TrainConfig, train

    with tempfile.TemporaryDirectory(prefix="naspipe-figures-") as tmp:
        cfg = TrainConfig.create(space, Path(tmp) / "csp", stages=stages, subnets=subnets, seed=seed, policy="csp",
                                 progress=False)
        measured = train(cfg).trace
    twin = simulated_twin(cfg.space, cfg.partition, cfg.stream(), measured, "csp", seed)
    traces = {"measured: 4 stage processes (runtime)": measured,
              "simulated: cost model rescaled to the measured mean F / B times": twin}
    title = (f"CSP on {space}, {stages} stages, {subnets} subnets: measured {max(e.end for e in measured.events):.3f} s"
             f" vs simulated {max(e.end for e in twin.events):.3f} s")
    return export(gantt(traces, title=title), gantt_svg(traces, title), out, "gantt_measured_vs_sim")


def sampler_figures(out: Path, space: str = "naspipe-k48", stages: int = 4, subnets: int = 24,
                    seed: int = 0) -> list[Path]:
    """CSP on a uniform and on a fair sequence (``--sampler fair``) of the same seed, one time axis."""
    from naspipe.sequences.samplers import make_stream

    sp = preset(space)
    part = partition(sp, stages)
    traces = {}
    for sampler in ("uniform", "fair"):
        trace = simulate(RunSpec.of(sp, part, make_stream(sp, seed, subnets, sampler), "csp", seed=seed)).trace
        traces[f"{sampler} sequence: utilisation {trace.utilization():.2f}"] = trace
    title = f"csp on {space}, {stages} stages, {subnets} subnets: a uniform and a fair sequence"
    return export(gantt(traces, title=title), gantt_svg(traces, title), out, "gantt_samplers")


def make_figures(out: str | Path, space: str = "naspipe-k48", stages: int = 4, subnets: int = 20,
                 dag_subnets: int = 12, seed: int = 0, measured: bool = False) -> list[Path]:
    """Simulate, draw and export (and with ``measured``, train a small run too); returns the files written."""
    out = Path(out)
    sp = preset(space)
    part = partition(sp, stages)
    stream = UniformStream(sp, seed, subnets)
    written = []
    traces = {}
    for policy in ("csp", "csp-bw"):
        trace = traces[policy] = simulate(RunSpec.of(sp, part, stream, policy, seed=seed)).trace
        title = (f"{policy} on {space}: {stages} stages, {subnets} subnets, utilisation {trace.utilization():.2f}")
        written += export(gantt(trace, title=title), gantt_svg(trace, title), out, f"gantt_{policy.replace('-', '_')}")
    g = dag_from_trace(traces["csp"], sp, part, [stream[j] for j in range(dag_subnets)])
    cp = critical_path(g)
    title = f"causal DAG of {dag_subnets} subnets ({space}, {stages} stages): critical path {cp.length * 1e3:.1f} ms"
    written += export(dag_figure(g, title=title), dag_svg(g, title), out, "dag")
    written += sampler_figures(out, space, stages, seed=seed)
    if measured:
        written += measured_figures(out, seed=seed)
    return written


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    measured = "--measured" in args
    args = [a for a in args if a != "--measured"]
    if len(args) != 1:
        print("usage: python -m naspipe.experiments.figures [--measured] OUT_DIR", file=sys.stderr)
        return 2
    for p in make_figures(args[0], measured=measured):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["export", "make_figures", "measured_figures", "sampler_figures", "scaled_space", "simulated_twin"]
