"""Keep a plotly ``FigureWidget``'s state current for views drawn later, not only for the views already drawn.

Why it exists: plotly sends a change to a ``FigureWidget`` (``batch_update``, ``restyle``) as a message that the
views already drawn apply, and that the browser's copy of the widget's state applies only once plotly's 5 MB
front-end module has loaded. The state a new view starts from is otherwise written at construction and when the
figure itself is displayed (``_repr_mimebundle_``), not when it is shown inside a box. So a view drawn later
started from the figure as it was made: a live monitor whose short run ended while that module still loaded on
a busy machine (empty bars after the run, seen in notebook 08 in the browser), or any widget after a page reload
(the browser asks the kernel for the state again). ``sync_new_views`` writes the figure's current data and
layout into that state, through plotly's own display hook, which does exactly this.
"""

from __future__ import annotations

from typing import Any


def sync_new_views(fig: Any) -> None:
    """Make ``fig`` (a ``go.FigureWidget``) the figure any view drawn from now on starts from; views already drawn
    are unchanged (they ignore this state and follow the change messages)."""
    fig._repr_mimebundle_()  # plotly copies its data and layout into the widget's synced state here
