"""Keep JupyterLab's kernel status at *Busy* while a cell blocks on a live view.

Why it exists: JupyterLab (4.6, with ipykernel 7 and the widget manager) opens a kernel *subshell* on the
control channel when a widget is shown while a cell runs; ipykernel answers that control request with its
own ``busy`` / ``idle`` status messages, and JupyterLab's status bar shows the last one: **Idle**, for as long
as the monitor cell keeps training under the user's eyes (seen in a browser: 9 s to 26 s of "Idle" while the
cell showed ``[*]``). ``announce_busy()`` sends the status the kernel is really in, ``busy``, again on IOPub,
with the running cell's request as parent (the protocol allows a status at any time; ipykernel sends the
cell's ``idle`` when it ends). Outside a kernel it does nothing.
"""

from __future__ import annotations

import time

_last = 0.0


def announce_busy(every: float = 1.0) -> bool:
    """Publish ``status: busy`` for the running cell, at most once per ``every`` seconds; True if sent."""
    global _last
    now = time.monotonic()
    if now - _last < every:
        return False
    try:
        from ipykernel.kernelbase import Kernel
    except ImportError:
        return False
    if not Kernel.initialized():
        return False
    kernel = Kernel.instance()
    publish = getattr(kernel, "_publish_status", None)  # ipykernel's own busy / idle sender
    if kernel.session is None or publish is None:
        return False
    publish("busy", "shell")  # parent: the shell request being executed (the cell)
    _last = now
    return True
