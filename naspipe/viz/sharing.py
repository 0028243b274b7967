"""Which layers a sequence of subnets shares: the table behind CSP's causal rule, for teaching.

For each subnet ``j`` and choice block ``b``: the candidate ``j`` selects and the previous subnet that
selected the same candidate (whose write ``F(j,s)`` must wait for). ``waits_for[s]`` lists those earlier
subnets per stage: exactly the causal edges of the dependency DAG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from naspipe.spaces.partition import Partition
from naspipe.spaces.space import SearchSpace, Subnet


@dataclass(frozen=True)
class SharingRow:
    subnet: int
    choices: tuple[str, ...]  # candidate name per choice block
    previous: tuple[int | None, ...]  # previous user of the same candidate, per choice block
    waits_for: tuple[tuple[int, ...], ...]  # per stage: earlier subnets whose write F(j,s) waits for


def sharing_rows(space: SearchSpace, part: Partition, subnets: Sequence[Subnet]) -> list[SharingRow]:
    """One row per subnet (choice blocks only, in block order)."""
    blocks = space.choice_blocks
    stage_of = {b: part.stage_of(b) for b in blocks}
    last: dict[tuple[int, int], int] = {}
    rows = []
    for j, sub in enumerate(subnets):
        prev = tuple(last.get((b, sub[b])) for b in blocks)
        waits: list[set[int]] = [set() for _ in range(part.stages)]
        for b, i in zip(blocks, prev, strict=True):
            if i is not None:
                waits[stage_of[b]].add(i)
        rows.append(SharingRow(j, tuple(space.candidate(b, sub[b]).name for b in blocks), prev,
                               tuple(tuple(sorted(w)) for w in waits)))
        for b in blocks:
            last[(b, sub[b])] = j
    return rows


def _candidate_colors(k: int) -> list[str] | str:
    pal = list(qualitative.Pastel1) + list(qualitative.Pastel2)
    if k > len(pal):
        return "viridis"
    return pal[:max(k, 2)]


def sharing_figure(space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                   title: str | None = None) -> go.Figure:
    """A heatmap: rows = subnets, columns = choice blocks (by stage), colour = candidate, ``←i`` = shared with i."""
    rows = sharing_rows(space, part, subnets)
    blocks = space.choice_blocks
    kmax = max((space.blocks[b].k for b in blocks), default=1)
    z = np.array([[sub[b] for b in blocks] for sub in subnets], dtype=float).reshape(len(subnets), len(blocks))
    text = [[c + ("" if p is None else f" ←{p}") for c, p in zip(r.choices, r.previous, strict=True)] for r in rows]
    cols = [f"{space.blocks[b].name}<br>stage {part.stage_of(b)}" for b in blocks]
    ylab = [f"subnet {r.subnet}" for r in rows]
    hover = [[f"subnet {r.subnet}, block {space.blocks[b].name} (stage {part.stage_of(b)})<br>candidate {c}"
              + (f"<br>shared with subnet {p}: F({r.subnet},{part.stage_of(b)}) waits for its write" if p is not None
                 else "<br>first user of this candidate")
              for b, c, p in zip(blocks, r.choices, r.previous, strict=True)] for r in rows]
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=ylab, text=text, texttemplate="%{text}", hovertext=hover,
                               hovertemplate="%{hovertext}<extra></extra>", colorscale=_candidate_colors(kmax),
                               zmin=0, zmax=max(kmax - 1, 1), showscale=False,
                               xgap=2, ygap=2))
    waits = ["; ".join(f"s{s}: {', '.join(map(str, w))}" for s, w in enumerate(r.waits_for) if w) or "-" for r in rows]
    for y, w in zip(ylab, waits, strict=True):
        fig.add_annotation(x=1.01, xref="paper", y=y, yref="y", text=w, showarrow=False, xanchor="left",
                           font={"size": 11})
    fig.add_annotation(x=1.01, xref="paper", y=1.0, yref="paper", yanchor="bottom", text="<b>waits for</b>",
                       showarrow=False, xanchor="left")
    fig.update_layout(title={"text": title or "candidates per subnet; ←i: last used by subnet i (a causal edge)",
                             "y": 0.99, "yanchor": "top"},  # above the top axis and its title, not on them
                      template="plotly_white", height=155 + 28 * len(rows),
                      yaxis={"autorange": "reversed", "title": {"text": "subnet (training order)"}},
                      xaxis={"title": {"text": "choice block"}, "side": "top"},
                      margin={"l": 90, "r": 200, "t": 125, "b": 30})
    return fig
