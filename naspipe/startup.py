"""A process's start-up imports, made with Python's cyclic garbage collector paused, then frozen.

Why it exists: every process naspipe starts for itself (a stage's fork server, a torchrun rank, a command) begins
by importing torch, and a trainer's torch._dynamo (the first torch.optim optimizer imports it): several hundred
thousand objects that live as long as the process. While they are made, the collector runs about a thousand
times, and each time the survivors outgrow the old generation by a quarter it walks all of them again; at exit it
walks them once more. None of that frees anything. Here the collector is paused while the imports run, and what
they made is moved to the permanent generation (``gc.freeze``, which CPython's documentation advises for a server
that forks children: the fork server's stages inherit it), so no later collection walks it. On the 2-core test
machine a process importing torch and torch._dynamo so spends about a third less CPU
(``benchmarks/startup.py`` measures it side by side).

Only for processes whose start naspipe owns: a frozen object is still freed when its last reference goes, but a
reference cycle among frozen objects is never collected, so a library call (a notebook's) never freezes.
"""

from __future__ import annotations

import gc
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

TRAINER = ("torch", "torch._dynamo")  # what a process that trains imports at start (its optimizer needs both)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block's imports without cyclic collections, then freeze every object the process holds."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class _PausedLoader(importlib.machinery.SourceFileLoader):
    """The module's own loader, running its body (and so every import it makes) with the collector paused."""

    def exec_module(self, module: ModuleType) -> None:
        with collector_paused():
            super().exec_module(module)


class _FirstImportsPaused(importlib.abc.MetaPathFinder):
    """Finds nothing of its own: the first import of each of ``names`` gets that module's spec with its loader
    swapped for ``_PausedLoader``; it leaves ``sys.meta_path`` once all of them were imported."""

    def __init__(self, names: tuple[str, ...]):
        self.names = set(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in self.names:
            return None
        self.names.discard(fullname)
        if not self.names and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec  # (found elsewhere, or loaded another way: imported as usual)
        spec.loader = _PausedLoader(spec.loader.name, spec.loader.path)
        return spec


def pause_at_first_import(*modules: str) -> None:
    """Wherever this process first imports each of ``modules`` (torch, say), import it as a start-up import
    (above); a process that never needs them never imports them (``naspipe simulate`` stays torch-free, a bad
    argument is refused at once)."""
    todo = tuple(m for m in modules if m not in sys.modules)
    if todo:
        sys.meta_path.insert(0, _FirstImportsPaused(todo))


def import_at_start(*modules: str) -> None:
    """Import ``modules`` (torch, say) as a process's start-up imports (above); those imported already cost
    nothing."""
    if all(m in sys.modules for m in modules):
        return
    with collector_paused():
        for name in modules:
            importlib.import_module(name)
