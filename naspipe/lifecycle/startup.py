"""A process's start-up imports, made with Python's cyclic garbage collector paused, then frozen.

Why it exists: the processes naspipe starts for itself (a stage's fork server, a torchrun rank, a truth worker, a
``naspipe`` command) import torch, and those that train torch._dynamo too (the first torch.optim optimizer imports
it): several hundred thousand objects that live as long as the process. While they are made, the collector runs
about 700 times (a fork server's preload), and each time the survivors outgrow the old generation by a quarter it
walks all of them again; at exit it walks them once more. Here the collector is paused while the imports run; one
collection at the end frees what they left as garbage, and everything then alive is moved to the permanent
generation (``gc.freeze``, which CPython's documentation advises for a server that forks children: the fork server's
stages inherit it), so no later collection walks it. On the 2-core test machine a process importing torch and
torch._dynamo so spends about a quarter less CPU (``benchmarks/startup.py`` measures it side by side).

Only at a process's start, in processes naspipe owns: a frozen object is still freed when its last reference
goes, but a reference cycle among frozen objects is never collected, so what is alive at the freeze must be what
the process keeps. A library call (a notebook's) never freezes; a command freezes at its first torch import,
before its work; a rank and a stage import torch._dynamo at their start, not at their first optimizer.
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

TRAINER = ("torch", "torch._dynamo")  # what a process that trains imports at start (its optimizer needs both)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block's imports without cyclic collections; then collect once (the garbage they left) and freeze
    every object the process holds."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()


def import_at_start(*modules: str) -> None:
    """Import ``modules`` (torch, say) as a process's start-up imports (above); nothing happens when all of them
    were imported already."""
    if all(m in sys.modules for m in modules):
        return
    with collector_paused():
        for name in modules:
            importlib.import_module(name)


class _PausedLoader(importlib.machinery.SourceFileLoader):
    """The module's own loader, running its body (and so every import it makes) as a start-up import; the hook
    that handed it out leaves ``sys.meta_path`` then."""

    def __init__(self, fullname: str, path: str, hook: _FirstImportPaused):
        super().__init__(fullname, path)
        self.hook = hook

    def exec_module(self, module: ModuleType) -> None:
        self.hook.leave()
        with collector_paused():
            super().exec_module(module)


class _FirstImportPaused(importlib.abc.MetaPathFinder):
    """Finds nothing of its own: asks the finders after it for ``name`` and hands back their spec with a
    ``_PausedLoader`` (for a module loaded from source or bytecode beside it; anything else is imported as
    usual). A lookup alone (``importlib.util.find_spec``) does not use it up: the import does."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self not in sys.meta_path:
            return None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _PausedLoader(spec.loader.name, spec.loader.path, self)
        return spec

    def leave(self) -> None:
        # (a new list: an import that is walking the old one meanwhile walks it to its end)
        sys.meta_path = [f for f in sys.meta_path if f is not self]


def pause_at_first_import(module: str) -> None:
    """Wherever this process first imports ``module`` (torch), import it as a start-up import (above): a process
    that never needs it never imports it (``naspipe simulate`` stays torch-free, a bad argument is refused at
    once). For a process's own start only (its ``__main__``)."""
    if module not in sys.modules:
        sys.meta_path.insert(0, _FirstImportPaused(module))
