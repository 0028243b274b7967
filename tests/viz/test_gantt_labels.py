"""Subnet ids on Gantt bars: readable, on every bar that holds one, never wider than their bar (issue 29, item 8).

Notebook 02 draws four policies over 12 subnets of one-unit tasks: csp-bw's B and W bars are one unit (about 12 px
in a notebook), and plotly's own fitting (3 px padding a side, the label shrunk, hidden below 6 px) left subnets 10
and 11 without a number on every csp-bw bar (and on every one-unit F bar). The Gantt now draws ids at one size
(``LABEL_PX``) unshrunk on the bars that hold them at a notebook's plot width (``label_fits``), and puts the legend
under the time axis, giving the bars the width a legend column took. The browser test looks at the real drawing in
chromium (skipped where chromium or Playwright is missing, unless ``CI`` is set); its screenshot goes to
``out/browser/02_gantt_labels.png``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from naspipe import UniformStream, experiments, simulate
from naspipe.runspec.spec import RunSpec
from naspipe.sched.trace import COMPUTE_KINDS
from naspipe.spaces.partition import partition
from naspipe.spaces.space import unit_space
from naspipe.viz import gantt
from naspipe.viz.gantt import LABEL_PX, label_fits

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _notebook_02_figure(subnets: int = 12):
    """The four-policy Gantt of notebook 02 at its default parameters (K 3, 4 blocks, 2 stages, seed 1)."""
    space = unit_space(3, choice_blocks=4, fwd=0.5, bwd=1.0, name="teaching-k3")
    part = partition(space, 2)
    stream = UniformStream(space, 1, subnets)
    results = experiments.compare_policies(space, part, stream, ("csp", "csp-bw", "bsp", "asp"),
                                           options={"bsp": {"micro_batches": 4}})
    return gantt({p: r.trace for p, r in results.items()}, title="the same subnets under four policies",
                 unit="units")


def _labelled(fig) -> list[tuple[str, str, str]]:
    """(panel's x axis, bar's subnet from its hover text, its label) of every compute bar."""
    out = []
    for bar in fig.data:
        if bar.legendgroup in COMPUTE_KINDS:
            for hover, text in zip(bar.hovertext, bar.text, strict=True):
                out.append((bar.xaxis, re.search(r"subnet (\d+)", hover).group(1), text))
    return out


def test_every_bar_of_notebook_02s_figure_carries_its_subnet_at_one_readable_size():
    fig = _notebook_02_figure()
    bars = _labelled(fig)
    assert len(bars) == 4 * 2 * 12 * 2 + 2 * 12  # F and B per subnet and stage, and csp-bw's W
    assert all(text == subnet for _, subnet, text in bars)  # 10 and 11 too, on one-unit bars
    for bar in fig.data:  # drawn unshrunk (plotly's fitting hid two-digit ids), at LABEL_PX, never hidden by size
        assert bar.constraintext == "none" and bar.textfont.size == LABEL_PX >= 8
    assert fig.layout.uniformtext.mode is None
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0  # under the axis: the bars get its width


def test_a_bar_too_narrow_for_its_id_carries_none():
    space = unit_space(3, choice_blocks=4, fwd=0.5, bwd=1.0)
    part = partition(space, 2)
    fig = gantt(simulate(RunSpec.of(space, part, UniformStream(space, 1, 30), "csp")).trace, unit="units", labels=True)
    span = max(b + x for bar in fig.data for b, x in zip(bar.base, bar.x, strict=True))
    shown, empty = set(), set()
    for bar in fig.data:
        for x, hover, text in zip(bar.x, bar.hovertext, bar.text, strict=True):
            subnet = re.search(r"subnet (\d+)", hover).group(1)
            assert text in ("", subnet) and bool(text) == label_fits(subnet, x, span)
            (shown if text else empty).add(subnet)
    assert {"0", "9"} <= shown and {"10", "29"} <= empty  # about 160 units: one digit fits a two-unit B, two do not
    assert not label_fits("10", 2.0, 160.0) and label_fits("10", 1.0, 66.0)


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed")
def test_in_chromium_every_id_is_drawn_inside_its_bar(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    html = tmp_path / "gantt.html"
    _notebook_02_figure().write_html(html, include_plotlyjs=True)
    labels = """() => [...document.querySelectorAll('g.point')].map(g => {
        const t = g.querySelector('text'), b = g.querySelector('path').getBoundingClientRect();
        if (!t || !t.textContent) return null;
        const r = t.getBoundingClientRect();
        return {text: t.textContent, left: r.left - b.left, right: b.right - r.right,
                size: getComputedStyle(t).fontSize, shown: getComputedStyle(t).display !== 'none'}; }
      ).filter(x => x)"""
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            page = browser.new_page(viewport={"width": 965, "height": 900})  # a notebook output at a 1400 px window
            page.goto(html.as_uri())
            page.wait_for_selector(".main-svg")
            page.wait_for_timeout(300)
            drawn = page.evaluate(labels)
            (ROOT / "out" / "browser").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ROOT / "out" / "browser" / "02_gantt_labels.png"), full_page=True)
        finally:
            browser.close()
    assert len(drawn) == len(_labelled(_notebook_02_figure())), "a bar lost its id"
    assert sum(d["text"] in ("10", "11") for d in drawn) == 4 * 2 * 2 * 2 + 2 * 2  # two-digit ids everywhere
    assert all(d["shown"] and d["size"] == f"{LABEL_PX}px" for d in drawn), drawn[:3]
    over = [d for d in drawn if d["left"] < -0.5 or d["right"] < -0.5]
    assert not over, over[:5]  # no id drawn over its neighbour
