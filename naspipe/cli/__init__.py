"""The ``naspipe`` command. Each subcommand lives in its own module of this package.

A subcommand module defines ``COMMAND`` (its name), ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Bad input raises a ``naspipe.errors.UserError`` (the command's own checks and every library
refusal alike), which ``main`` catches once: one line on stderr, exit code 2, no traceback, and no process is
started. A failure that is no mistake of the user (a stage that crashed) is said by the command, exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from naspipe.cli.shutdown import leave_despite_threads
from naspipe.errors import UserError
from naspipe.lifecycle.startup import pause_at_first_import
from naspipe.runtime.processes.signals import EXIT_TERMINATED, Terminated


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UserError(f"{self.prog}: {message}")


def _commands() -> list:
    mods = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "common":
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "COMMAND"):
            mods.append(mod)
    return sorted(mods, key=lambda m: getattr(m, "ORDER", 50))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="naspipe", description="Reproducible pipeline-parallel supernet training (CSP).")
    parser.set_defaults(_run=None, _argv=None, kernels=None)  # (no command given: the help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for mod in _commands():
        p = sub.add_parser(mod.COMMAND, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from naspipe.supernet.usercode import count_sigint

    count_sigint()  # a KeyboardInterrupt user code raises is its failure; Ctrl-C stays an interruption
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args._run is None:
            parser.print_help()
            return 2
        args._argv = list(sys.argv[1:] if argv is None else argv)  # (a resume hint repeats the command line)
        if _AS_COMMAND and args.kernels is not None:
            _enter_kernels(args.kernels)
        return int(args._run(args) or 0)
    except UserError as e:  # a refusal, from the command or the library: its first line (a user's error can span more)
        print(f"naspipe: error: {first_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        _stopping()
        print(f"naspipe: interrupted{_resume_hint(e, args)}", file=sys.stderr)
        return 130
    except Terminated as e:
        _stopping()
        print(f"naspipe: terminated by SIGTERM{_resume_hint(e, args)}", file=sys.stderr)
        return EXIT_TERMINATED


def _enter_kernels(kind: str) -> None:
    """The ``naspipe`` command's own process computes under ``kind`` (it has computed nothing yet; a KernelsError,
    a UserError, otherwise)."""
    from naspipe.lifecycle.kernels import enter

    enter(kind)


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message: a refusal is said in one line."""
    return next(iter(str(e).splitlines()), "")


def _stopping() -> None:
    """The command is ending on a signal: a second Ctrl-C or SIGTERM (the run's cleanup can be over before it
    arrives) must not cut the message and exit short with a KeyboardInterrupt of its own."""
    import signal
    import threading

    if _AS_COMMAND and threading.current_thread() is threading.main_thread():  # (not a caller's own process)
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)


def _resume_hint(e: BaseException, args: argparse.Namespace | None) -> str:
    """``; the last complete checkpoint ...: to continue, run naspipe train ...`` for a stopped run that has one."""
    saved = _checkpoint_named(e)
    if saved is None or args is None:
        return ""
    from naspipe.cli.cmd_train import resume_hint

    return f"; {resume_hint(saved, args)}"


def _checkpoint_named(e: BaseException) -> int | None:
    """The checkpoint the launcher attached to the signal's exception. A second Ctrl-C that lands after the run
    wrote ``status.json`` and before ``_stopping`` raises a KeyboardInterrupt of its own while the first one
    unwinds: the first (which names the checkpoint) is its ``__context__``."""
    from naspipe.lifecycle.exception_chain import chain

    return next((saved for x in chain(e) if (saved := getattr(x, "checkpoint", None)) is not None), None)


_AS_COMMAND = False  # the ``naspipe`` command itself, whose process ends with main


def entry() -> None:
    global _AS_COMMAND
    _AS_COMMAND = True
    pause_at_first_import("torch")  # the command's process: torch, where first needed, the quick way
    try:
        rc = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `naspipe simulate --json | head`: the reader left early; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's recipe: the exit flush is quiet)
        rc = 1
    leave_despite_threads(rc)
    sys.exit(rc)
