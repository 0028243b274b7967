"""User code that ends or interrupts its process is a failure of that code, like any exception.

Why it exists: ``SystemExit`` and ``KeyboardInterrupt`` are not ``Exception``s, so a factory, ``data`` or ``loss``
that calls ``sys.exit(0)`` slipped past every ``except Exception`` around user code and ``naspipe train`` exited 0
with no output and no run; one raising ``KeyboardInterrupt`` looked like Ctrl-C ("interrupted", exit 130). Every
place that calls user code catches ``user_errors()`` instead and reports one line naming the function.

A ``KeyboardInterrupt`` is the user code's own only when no real SIGINT arrived: the command line counts SIGINTs
(``count_sigint``), and ``user_errors()`` leaves ``KeyboardInterrupt`` out once one arrived (Ctrl-C stays an
interruption) or where nothing counts them (a library caller's Ctrl-C is never renamed).
"""

from __future__ import annotations

import os
import signal
import sys
import sysconfig
import threading
import traceback
from typing import Any

_state = {"counting": False, "sigints": 0}


def _on_sigint(signum: int, frame: Any) -> None:
    _state["sigints"] += 1
    raise KeyboardInterrupt


def count_sigint() -> None:
    """Count SIGINTs from now on, from 0 (each still raises ``KeyboardInterrupt``); the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    _state["sigints"] = 0
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    _state["counting"] = signal.getsignal(signal.SIGINT) is _on_sigint


def user_errors() -> tuple[type[BaseException], ...]:
    """What an ``except`` around user code catches: every exception, ``SystemExit``, and ``KeyboardInterrupt``
    unless it may come from a real SIGINT (evaluated when the exception is matched, so it knows)."""
    if threading.current_thread() is not threading.main_thread():  # SIGINT is delivered to the main thread only
        return (Exception, SystemExit, KeyboardInterrupt)
    if _state["counting"] and not _state["sigints"]:
        return (Exception, SystemExit, KeyboardInterrupt)
    return (Exception, SystemExit)


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message; for ``sys.exit(code)`` the call itself, which says what happened."""
    if isinstance(e, SystemExit):
        return f"sys.exit({e.code!r}) was called"
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ("(no message)" if isinstance(e, KeyboardInterrupt) else "")


def origin(e: BaseException) -> str:
    """Where user code raised ``e``: ``" in FUNCTION (FILE:LINE)"`` for the innermost frame outside naspipe, the
    standard library and the installed packages; "" when no frame is (naspipe's own errors)."""
    frames = traceback.extract_tb(e.__traceback__)
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libs = {os.path.abspath(p) for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                         sysconfig.get_paths()["platlib"], sys.prefix, sys.base_prefix)}
    mine = [f for f in frames if not os.path.abspath(f.filename).startswith(own + os.sep)]
    users = [f for f in mine if not f.filename.startswith("<frozen")
             and not any(os.path.abspath(f.filename).startswith(lib + os.sep) for lib in libs)]
    if not users:
        return ""
    f = users[-1]
    return f" in {f.name} ({os.path.basename(f.filename)}:{f.lineno})"
