"""The one base class of a refusal a user can act on: ``UserError``.

Why it exists: a bad argument, a file that does not fit, a space that cannot be built are refused with one line
that says what to change, wherever in the package the mistake is found. Every such refusal (``RunSpecError``,
``ConfigError``, ``SpaceError``, ``TruthError``, ...) inherits ``UserError``, so the ``naspipe`` command catches it
once (``naspipe.cli.main``: ``naspipe: error: <message>``, exit code 2) instead of every command re-wrapping every
library error. An error that is a failure, not a mistake (a stage that crashed, a run that deadlocked), is no
``UserError``: it ends a command with exit code 1.

It subclasses ``ValueError`` (a refusal of a value), so callers that catch ``ValueError`` keep working. This package
imports nothing, so it is importable without torch, before the command line checks its arguments.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(ValueError):
    """A refusal a user can act on: its message is one line saying what was wrong and what to do."""
