"""What a notebook widget shows beyond the view that drew it live: a view drawn later, and a reader without widgets.

Why it exists: plotly sends a change to a ``FigureWidget`` (``batch_update``, ``restyle``) as a message that the
views already drawn apply, and that the browser's copy of the widget's state applies only once plotly's 5 MB
front-end module has loaded. The state a new view starts from is otherwise written at construction and when the
figure itself is displayed (``_repr_mimebundle_``), not when it is shown inside a box. So a view drawn later
started from the figure as it was made: a live monitor whose short run ended while that module still loaded on
a busy machine (empty bars after the run, seen in notebook 08 in the browser), or any widget after a page reload
(the browser asks the kernel for the state again). ``sync_new_views`` writes the figure's current data and
layout into that state, through plotly's own display hook, which does exactly this.

Where widgets do not draw at all (a notebook opened executed or untrusted, or without its kernel), a cell's
output shows its text form, for a box of widgets its repr ("VBox(children=(HBox(children=(IntProgress(...");
``with_text`` gives a box a line that says what it is instead.
"""

from __future__ import annotations

from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # how a notebook output names a widget's view


def sync_new_views(fig: Any) -> None:
    """Make ``fig`` (a ``go.FigureWidget``) the figure any view drawn from now on starts from; views already drawn
    are unchanged (they ignore this state and follow the change messages)."""
    fig._repr_mimebundle_()  # plotly copies its data and layout into the widget's synced state here


def with_text(box: Any, text: str) -> Any:
    """``box`` (an ipywidgets widget), shown as its view and, where widgets do not draw, as ``text``; returns it."""
    bundle = {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": box.model_id}, "text/plain": text}
    box._repr_mimebundle_ = lambda **kwargs: dict(bundle)  # IPython's display hook, as ipywidgets' close() sets it
    return box
