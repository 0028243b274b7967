"""What a supernet is, as digests a run records: its source, and its candidates' shapes and initial weights.

Why it exists: a run's identity (``naspipe.runfolder.runs``) named a supernet by its labels and candidate names only,
so a
``--resume`` after an edit of the module (relu -> tanh) continued silently with other code, and ``verify`` of two
definitions said only ``differ: subnet 0``. Two digests close that:

* ``source_digest``: for ``module:function``, the SHA-256 of the source files of that module and of every user
  module it reaches (through its globals and the supernet's factories, data, loss and init; the standard
  library, installed packages, torch and naspipe are not the supernet's definition). For a supernet defined in a
  notebook (``__main__``) it is the supernet pickled by value with cloudpickle, made canonical: code objects
  without file names and line numbers, classes by name, bases and members (not cloudpickle's per-process class
  id), tensors by dtype, shape and bytes; so the same cell run again in another kernel gives the same digest.
* ``WeightsDigest``: per block, the SHA-256 of each candidate's name and ``state_dict`` (names, dtypes, shapes,
  bytes) as the probe built it (``naspipe.supernet.validate``, seed 0): a shape change or another initialisation
  is named by its block.

No torch at import time (it is imported where tensors are hashed).
"""

from __future__ import annotations

import hashlib
import io
import sys
import sysconfig
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import cloudpickle

# what is never a user's definition: the standard library and installed packages (sysconfig's paths), and these
_NOT_USER = ("naspipe", "torch", "numpy", "cloudpickle")


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {str(Path(paths[k]).resolve()) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(roots))


_LIBRARY = _library_roots()


def _user_module(mod: Any) -> Path | None:
    """The source file of ``mod`` when it is a user's module (not the standard library, a package or naspipe)."""
    if not isinstance(mod, types.ModuleType) or mod.__name__.partition(".")[0] in _NOT_USER:
        return None
    f = getattr(mod, "__file__", None)
    if not f or not str(f).endswith(".py"):
        return None
    p = Path(f).resolve()
    return None if str(p).startswith(_LIBRARY) else p


def _module_of(obj: Any) -> Any:
    if isinstance(obj, types.ModuleType):
        return obj
    try:  # any object of a user's module globals: a proxy's attribute may raise anything
        obj = getattr(obj, "func", obj)  # functools.partial
        name = getattr(obj, "__module__", None)
    except Exception:  # noqa: BLE001
        return None
    return sys.modules.get(name) if isinstance(name, str) else None


def _callables(sn: Any) -> Iterable[Any]:
    for b in sn.blocks:
        yield from b.candidates.values()
    yield from (sn.data, sn.loss, sn.init, sn.accuracy, sn.heldout)


def source_digest(sn: Any, spec: str | None) -> str | None:
    """The digest of ``sn``'s source: the user modules of ``module:function`` ``spec``, or (``spec`` None) the
    supernet pickled by value and made canonical; None when it cannot be pickled (shipping it says why)."""
    if spec is None:
        return _pickled_digest(sn)
    start = [sys.modules.get(spec.partition(":")[0]), *(_module_of(c) for c in _callables(sn))]
    seen: dict[str, Path] = {}
    todo = [m for m in start if _user_module(m) is not None]
    while todo:  # the user modules reachable through module globals
        mod = todo.pop()
        if mod.__name__ in seen:
            continue
        seen[mod.__name__] = _user_module(mod)  # type: ignore[assignment]
        for value in list(vars(mod).values()):
            m = _module_of(value)
            if m is not None and m.__name__ not in seen and _user_module(m) is not None:
                todo.append(m)
    h = hashlib.sha256(f"naspipe-source:{spec}".encode())
    for name in sorted(seen):
        try:
            text = seen[name].read_bytes()
        except OSError:
            text = b"<unreadable>"
        h.update(f"\0{name}\0{len(text)}\0".encode())
        h.update(text)
    return h.hexdigest()


class WeightsDigest:
    """SHA-256 over candidates added one at a time (``add(name, module)``): each name and its module's
    ``state_dict`` (names, dtypes, shapes, bytes); nothing of a module is kept."""

    def __init__(self) -> None:
        self._h = hashlib.sha256(b"naspipe-weights")

    def add(self, name: str, mod: Any) -> None:
        self._h.update(f"\0candidate {name}".encode())
        for key, t in mod.state_dict().items():
            self._h.update(f"\0{key}:{t.dtype}:{tuple(t.shape)}:".encode())
            self._h.update(_bytes(t))

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _bytes(t: Any) -> bytes:
    import torch

    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


# ---- the canonical by-value pickle of a notebook's supernet ------------------------------------------------------
def _pickled_digest(sn: Any) -> str | None:
    buf = io.BytesIO()
    try:
        _Canonical(buf, protocol=5).dump(sn.with_costs(None))  # costs never change what a run computes
    except Exception:  # noqa: BLE001 - not picklable: check_shippable names the cause when it must travel
        return None
    return hashlib.sha256(buf.getvalue()).hexdigest()


def _by_reference(obj: Any) -> bool:
    """Importable under its module and qualified name (pickled by name): not a definition of a notebook's."""
    mod = sys.modules.get(getattr(obj, "__module__", None) or "")
    if mod is None or mod.__name__ == "__main__":
        return False
    found: Any = mod
    for part in str(getattr(obj, "__qualname__", "")).split("."):
        found = getattr(found, part, None)
    return found is obj


_CLASS_SKIP = ("__dict__", "__weakref__", "__firstlineno__", "_abc_impl")


def _mark(*args: Any) -> None:  # the callable recorded in canonical reductions (never called: nothing is loaded)
    return None


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it refer to."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _mark


class _Canonical(cloudpickle.Pickler):
    """cloudpickle without what differs between two processes running the same code."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.CodeType):
            return _mark, ("code", obj.co_name, obj.co_argcount, obj.co_posonlyargcount, obj.co_kwonlyargcount,
                           obj.co_flags, obj.co_code, obj.co_consts, obj.co_names, obj.co_varnames,
                           obj.co_freevars, obj.co_cellvars)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return _mark, ("tensor", type(obj).__name__, str(obj.dtype), tuple(obj.shape),
                           obj.requires_grad, hashlib.sha256(_bytes(obj)).hexdigest())
        if isinstance(obj, types.FunctionType) and not _by_reference(obj):
            state = {"code": obj.__code__, "defaults": obj.__defaults__, "kwdefaults": obj.__kwdefaults__,
                     "globals": {k: obj.__globals__[k] for k in sorted(_names(obj.__code__)) if k in obj.__globals__},
                     "closure": tuple(_cell(c) for c in obj.__closure__ or ())}
            return _mark, ("function", obj.__qualname__), state, None, None, _mark
        if isinstance(obj, type) and not _by_reference(obj):
            members = {k: v for k, v in sorted(vars(obj).items()) if k not in _CLASS_SKIP}
            # the members are the state (saved after the class is memoised: methods may refer to their class)
            return _mark, ("class", obj.__qualname__, obj.__bases__), members, None, None, _mark
        return super().reducer_override(obj)
