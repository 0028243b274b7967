"""From a ``Supernet`` to the plain-data ``SearchSpace`` and back, in any process.

Why it exists: the scheduler, the simulator and every stage process read a ``SearchSpace`` (plain,
picklable data); only the torch side needs the user's factories. A space made from a supernet records
where to find it again in ``space.model``:

* ``{"kind": "supernet", "source": "module:function"}`` for ``--space module:function``: every process
  imports the module itself and calls the function, so it works with every start method and torchrun;
* a supernet defined in a notebook (``__main__``) travels by value: the space's ``model`` mapping carries
  the supernet pickled with ``cloudpickle`` as an attribute (not an item: it never reaches a JSON file),
  and each stage process unpickles it once.

``supernet_of(space)`` returns the Supernet in any process (cached). ``space_of(supernet)`` builds the
space, with measured costs when the supernet has a profile (``naspipe profile``, checked field by field by
``check_costs``), unit costs otherwise. A supernet defined in this process gets a definition token that its
runs record (``run.json``), so ``recorded_space`` finds that very definition again even after another
supernet of the same name is defined.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import sys
import threading
import types
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from naspipe.fileio import jsonfile
from naspipe.spaces.space import MAX_BYTES, MAX_SECONDS, Block, Candidate, SearchSpace, register_resolver
from naspipe.supernet.declare import Supernet, SupernetError
from naspipe.supernet.usercode import first_line, user_errors

KIND = "supernet"
COSTS_SUFFIX = ".costs.json"


class ModelInfo(dict):
    """``space.model`` of a supernet space: plain items; for a supernet defined in this process it also holds
    the supernet, which travels pickled by value (cloudpickle) when the space is pickled for a stage process."""

    supernet: Supernet | None = None
    payload: bytes | None = None
    profiled: bool = False  # its costs come from a measurement (naspipe profile), not unit costs
    # which definition of a supernet defined in a process (a notebook) this is: ``<process>:<n>``, recorded
    # in run.json so a run found again in the same process uses its own definition, not a later one of that name
    definition: str | None = None
    # what the supernet is (``naspipe.supernet.definition``): ``source_sha256`` (its code) and ``weights_sha256``
    # (label -> digest of the block's candidates' shapes and initial weights); the run's identity records them
    digests: dict[str, Any] = {}

    def shippable(self) -> bytes | None:
        """The supernet pickled by value (once); SupernetError saying what could not be pickled."""
        if self.payload is None and self.supernet is not None:
            self.payload = _pickle(self.supernet)
        return self.payload

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (dict(self), self.shippable(), self.definition, self.digests))


def _restore(items: dict[str, Any], payload: bytes | None, definition: str | None = None,
             digests: dict[str, Any] | None = None) -> ModelInfo:
    m = ModelInfo(items)
    m.payload = payload
    m.definition = definition
    m.digests = dict(digests or {})
    return m


_CACHE: dict[Any, Supernet] = {}  # source or payload digest -> supernet (one import/unpickle per process)
# id(space) -> (space, supernet) for presets: two spaces may share one model dict but differ in batch size
_PRESETS: dict[int, tuple[SearchSpace, Supernet]] = {}
_BY_ID: dict[int, tuple[Any, Supernet]] = {}  # id(space.model) -> (model, supernet): per-task lookups
_BY_NAME: dict[str, SearchSpace] = {}  # supernets defined in this process, by name (latest wins)
_PROCESS = uuid.uuid4().hex[:12]  # this process, in definition tokens
# id(supernet) -> (supernet, token); token -> space: every definition made in this process (kept alive, so a
# run trained on one is searched with it even after another supernet of the same name is defined)
_TOKENS: dict[int, tuple[Supernet, str]] = {}
_BY_DEFINITION: dict[str, SearchSpace] = {}
# model kind of a built-in space -> its declaration (``naspipe.models.presets`` registers the preset families
# when ``naspipe.models`` is imported, so this package never imports the torch models)
_FAMILIES: dict[str, Any] = {}
# module:function -> digest of its source when imported; id(supernet) -> (supernet, digest) for a notebook's
_SOURCES: dict[str, str | None] = {}
_PICKLED_SOURCES: dict[int, tuple[Supernet, str | None]] = {}


def register_family(kind: str, declare: Any) -> None:
    """``declare(space) -> Supernet`` for the spaces whose ``model.kind`` is ``kind`` (the presets)."""
    _FAMILIES[kind] = declare


def is_spec(text: str) -> bool:
    """True for ``module:function`` (a dotted module path, one colon, an identifier)."""
    mod, sep, fn = text.partition(":")
    return bool(sep) and fn.isidentifier() and all(p.isidentifier() for p in mod.split(".")) and "/" not in text


def load_spec(spec: str, probe: bool = True) -> Supernet:
    """Import ``module`` and call ``function()`` (once per process); SupernetError (one line) when any of it
    fails. ``probe``: also run every candidate once on batch 0 (``naspipe.supernet.validate``)."""
    sn = _CACHE.get(spec)
    if sn is None:
        from naspipe.supernet.definition import source_digest

        sn = _call_spec(spec)
        _CACHE[spec] = sn
        _SOURCES[spec] = source_digest(sn, spec)  # the code as imported now (what this process runs)
    if probe:
        from naspipe.supernet.validate import probe_supernet

        probe_supernet(sn, where=f"--space {spec}: ")
    return sn


def forget(spec: str) -> None:
    """Forget what this process imported of a user's module, named alone or by a ``module:function`` of it: the
    module and its submodules, every supernet loaded from them and the digests of their source, so that the next
    ``load_spec`` imports the module's source as it is now (a module edited while a long-lived process runs: a
    notebook's kernel, a test). Other modules it imports are not imported again. Runs already trained keep the
    definition they were trained on (``defined_space``)."""
    module = spec.partition(":")[0]

    def ours(name: str) -> bool:
        return name == module or name.startswith(module + ".")

    for key in [k for k in _CACHE if isinstance(k, str) and ours(k.partition(":")[0])]:
        _CACHE.pop(key)
        _SOURCES.pop(key, None)
    for name in [m for m in sys.modules if ours(m)]:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def _call_spec(spec: str) -> Supernet:
    """Import the module and call the function with stdout sent to stderr: what user code prints while
    naspipe loads it must not mix into a command's output (``--json``)."""
    with contextlib.redirect_stdout(sys.stderr):
        return _call_spec_quietly(spec)


def _call_spec_quietly(spec: str) -> Supernet:
    mod_name, _, fn_name = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except user_errors() as e:  # noqa: BLE001 - the user's module: any error is reported in one line
        raise SupernetError(f"--space {spec}: module {mod_name!r} does not import ({type(e).__name__}: "
                            f"{_first_line(e)}); is its folder on PYTHONPATH?") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise SupernetError(f"--space {spec}: module {mod_name!r} has no function {fn_name!r}; --space takes "
                            "module:function (a function of your module that returns a naspipe.Supernet), the path "
                            "of a JSON space file (ending .json), or a preset name")
    try:
        sn = fn()
    except SupernetError as e:
        raise SupernetError(f"--space {spec}: {e}") from None
    except user_errors() as e:  # noqa: BLE001
        raise SupernetError(f"--space {spec}: {fn_name}() raised {type(e).__name__}: {_first_line(e)}") from None
    if not isinstance(sn, Supernet):
        raise SupernetError(f"--space {spec}: {fn_name}() returned {type(sn).__name__}, not a naspipe.Supernet")
    return sn


def default_costs_path(spec: str) -> Path | None:
    """``<module folder>/<module>.<function>.costs.json``: where ``naspipe profile`` stores its profile."""
    mod_name, _, fn_name = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except user_errors():  # noqa: BLE001
        return None
    f = getattr(mod, "__file__", None)
    return Path(f).with_name(f"{Path(f).stem}.{fn_name}{COSTS_SUFFIX}") if f else None


def _first_line(e: BaseException) -> str:
    return first_line(e) or type(e).__name__


def read_costs(costs: Any) -> dict[str, Any] | None:
    """The cost profile (a dict or the path of its JSON file), unchecked; SupernetError when unreadable."""
    if costs is None:
        return None
    if isinstance(costs, Mapping):
        return dict(costs)
    try:
        return jsonfile.loads(Path(costs).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # (malformed, not UTF-8, nested too deeply)
        raise SupernetError(f"cannot read the cost profile {str(costs)!r}: {_first_line(e)}") from None


_TIMES = ("fwd", "bwd")
_BYTES = ("param_bytes", "act_bytes")


def check_costs(prof: Any, sn: Supernet, where: str,
                remeasure: str = "naspipe.measure_costs(supernet)") -> dict[str, Any]:
    """``prof`` (a parsed profile) checked against ``sn``: an object whose ``candidates`` maps each label to
    its candidates' costs, every field a plausible number, every candidate of ``sn`` with its times (a missing one
    would cost a unit, 1 s, silently), measured at ``sn``'s batch size; SupernetError (one line naming the block,
    the candidate and the field, or the batch sizes, and ``remeasure``, how to measure again) otherwise."""
    if not isinstance(prof, Mapping):
        raise SupernetError(f"{where}: must be a JSON object with 'candidates' (naspipe profile writes one), "
                            f"got {type(prof).__name__}")
    pc = prof.get("candidates", {})
    if not isinstance(pc, Mapping):
        raise SupernetError(f"{where}: 'candidates' must be an object label -> candidate -> costs")
    names = {b.label: set(b.candidates) for b in sn.blocks}
    for label, cands in pc.items():
        if label not in names:
            raise SupernetError(f"{where}: block {label!r} is not in the supernet; re-run naspipe profile")
        if not isinstance(cands, Mapping):
            raise SupernetError(f"{where}: block {label!r}: must be an object candidate -> costs")
        for name, c in cands.items():
            w = f"{where}: block {label!r}, candidate {name!r}"
            if name not in names[label]:
                raise SupernetError(f"{w} is not in the supernet; re-run naspipe profile")
            if not isinstance(c, Mapping):
                raise SupernetError(f"{w}: must be an object of costs")
            for k in (*_TIMES, *_BYTES, "bwd_input_share"):
                if k in c:
                    top = MAX_SECONDS if k in _TIMES else MAX_BYTES if k in _BYTES else 1.0
                    _check_number(w, k, c[k], top, whole=k in _BYTES)
    if "message_bytes" in prof:
        _check_number(where, "message_bytes", prof["message_bytes"], MAX_BYTES, whole=True)
    bs = prof.get("batch_size")
    if bs is not None and (isinstance(bs, bool) or bs != sn.batch_size):
        raise SupernetError(f"{where} was measured at batch size {bs!r}, the supernet's is {sn.batch_size} (times "
                            f"grow with the batch): it is stale; measure again with {remeasure}")
    for b in sn.blocks:
        for name in b.candidates:
            have = pc.get(b.label, {}).get(name)
            lacks = [k for k in _TIMES if k not in (have or {})]
            if lacks:
                what = "has no cost" if have is None else f"has no {' or '.join(map(repr, lacks))}"
                raise SupernetError(f"{where}: block {b.label!r}, candidate {name!r} {what} (the profile is older "
                                    f"than the supernet, or partial); measure again with {remeasure}")
    return dict(prof)


def _check_number(where: str, key: str, v: Any, top: float, whole: bool) -> None:
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= top and (not whole or v == int(v))
    if not ok:
        kind = "a whole number" if whole else "a number"
        most = "2**50" if top == MAX_BYTES else f"{top:g}"
        raise SupernetError(f"{where}: field {key!r} must be {kind} in [0, {most}], got {v!r}")


def space_of(sn: Supernet, source: str | None = None) -> SearchSpace:
    """The plain-data space of ``sn``: blocks named by labels, costs from its profile (or unit costs).

    ``source``: ``module:function`` (also the space's name, so run folders name it); None ships ``sn``
    by value (cloudpickle) to the stage processes.
    """
    prof = read_costs(sn.costs)
    if prof is not None:
        where = f"cost profile {str(sn.costs)!r}" if isinstance(sn.costs, (str, Path)) else "cost profile"
        prof = check_costs(prof, sn, where, _remeasure(sn, source))
    prof = prof or {}
    pc = prof.get("candidates", {})
    blocks = []
    for b in sn.blocks:
        cands = []
        for name in b.candidates:
            c = pc.get(b.label, {}).get(name, {})
            keys = ("fwd", "bwd", "bwd_input_share", "param_bytes", "act_bytes")
            cands.append(Candidate(name=name, op="user", **{k: c[k] for k in keys if k in c}))
        blocks.append(Block(b.label, tuple(cands), fixed=b.fixed, role="fixed" if b.fixed else "choice"))
    model = ModelInfo(kind=KIND)
    model.profiled = bool(prof)  # an attribute, not an item: costs never change what a run computes
    if source is not None:
        model["source"] = source
        name = source
    else:
        model["name"] = name = sn.name or "supernet"
        model.supernet = sn
        model.definition = _token(sn)
    model.digests = _digests(sn, source)
    _BY_ID[id(model)] = (model, sn)
    space = SearchSpace(name=name, blocks=tuple(blocks), model=model, batch_size=sn.batch_size,
                        message_bytes=int(prof.get("message_bytes", 0)))
    if source is None:  # run folders name it: reports and search in this process find it by name
        _BY_NAME[name] = space
        _BY_DEFINITION[model.definition] = space  # type: ignore[index]
    return space


def _remeasure(sn: Supernet, source: str | None) -> str:
    """The command that measures ``sn``'s costs again into the profile it reads."""
    if source is None:
        return "naspipe.measure_costs(supernet)"
    default = default_costs_path(source)
    path = Path(sn.costs) if isinstance(sn.costs, (str, Path)) else None
    if path is not None and (default is None or path.resolve() != default.resolve()):
        return f"naspipe profile --space {source} --out {path}"
    return f"naspipe profile --space {source}"


def _digests(sn: Supernet, source: str | None) -> dict[str, Any]:
    """``source_sha256`` and ``weights_sha256`` of ``sn`` (each when known: weights once probed)."""
    from naspipe.supernet.definition import source_digest
    from naspipe.supernet.validate import probed_weights

    if source is not None:
        if source not in _SOURCES:
            _SOURCES[source] = source_digest(sn, source)
        src = _SOURCES[source]
    else:
        hit = _PICKLED_SOURCES.get(id(sn))
        if hit is None or hit[0] is not sn:
            hit = _PICKLED_SOURCES[id(sn)] = (sn, source_digest(sn, None))
        src = hit[1]
    weights = probed_weights(sn)
    return {**({"source_sha256": src} if src else {}), **({"weights_sha256": weights} if weights else {})}


def _token(sn: Supernet) -> str:
    """The definition token of ``sn``: one per Supernet object, unique across processes."""
    hit = _TOKENS.get(id(sn))
    if hit is not None and hit[0] is sn:
        return hit[1]
    tok = f"{_PROCESS}:{len(_TOKENS)}"
    _TOKENS[id(sn)] = (sn, tok)
    return tok


def recorded_space(run_dir: str | Path, name: str) -> SearchSpace | str:
    """What to resolve for the space a run folder recorded as ``name``: the very supernet definition when it
    was defined in this process (a later one of the same name does not replace it), else the name."""
    from naspipe.runfolder import runs

    try:
        ident = (runs.read_run(run_dir) or {}).get("identity", {})
    except runs.RunFileError:
        return name
    return defined_space(name, ident.get("definition")) or name


def defined_space(name: str, definition: str | None) -> SearchSpace | None:
    """The space a run recorded (``run.json``'s ``definition``) when its supernet was defined in this process;
    None when it was not (a module:function, a preset, or another process: resolve it by name).
    SupernetError when it was defined in this process under a definition that is gone (cannot happen: kept)."""
    if not definition or not str(definition).startswith(_PROCESS + ":"):
        return None
    space = _BY_DEFINITION.get(str(definition))
    if space is None or space.name != name:
        raise SupernetError(f"the run trained supernet {name!r} defined earlier in this process, which is no "
                            "longer known; pass its Supernet as space=")
    return space


def _unimportable_modules() -> list[Any]:
    """The loaded modules no other process can import by name (``runpy.run_path``'s ``<run_path>``: any name that
    is not a dotted path). A supernet's code from one of them, however wrapped (a lambda, a ``functools.partial``,
    a class), is pickled by value, as ``__main__``'s is (by reference, every stage failed: "No module named
    '<run_path>'")."""
    return [m for name, m in list(sys.modules.items())
            if isinstance(m, types.ModuleType) and m.__name__ == name
            and not all(p.isidentifier() for p in name.split("."))]


_BY_VALUE_LOCK = threading.Lock()  # (cloudpickle's registry of modules pickled by value is one per process)


def _pickle(sn: Supernet) -> bytes:
    import cloudpickle

    with _BY_VALUE_LOCK:
        registered = cloudpickle.list_registry_pickle_by_value()
        added = [m for m in _unimportable_modules() if m.__name__ not in registered]
        try:
            for m in added:
                cloudpickle.register_pickle_by_value(m)
            return cloudpickle.dumps(sn)
        except Exception as e:  # noqa: BLE001
            raise SupernetError(f"supernet {sn.name or 'supernet'!r} cannot be shipped to the stage processes "
                                f"(cloudpickle: {type(e).__name__}: {_first_line(e)}); keep open files, locks, "
                                "threads and generators out of its factories, data and loss, or define it in a "
                                "module and pass 'module:function'") from None
        finally:
            for m in added:  # (only those registered here: a module the user registered stays)
                cloudpickle.unregister_pickle_by_value(m)


def check_shippable(space: SearchSpace) -> None:
    """Pickle a notebook-defined supernet now (before any process starts); SupernetError if it cannot be."""
    m = space.model
    if isinstance(m, ModelInfo) and "source" not in m:
        m.shippable()


def supernet_of(space: SearchSpace) -> Supernet:
    """The Supernet behind a supernet space, in this process (imported or unpickled once)."""
    if getattr(space, "few_shot", None) is not None:  # a few-shot space: its base's supernet, candidates copied
        from naspipe.supernet.copied import copied_supernet

        return copied_supernet(space, supernet_of(space.base))
    m = space.model
    if isinstance(m, ModelInfo) and m.supernet is not None:
        return m.supernet
    if m.get("kind") != KIND:  # a preset family: declared from the whole space (its batch size, its data)
        preset = _PRESETS.get(id(space))
        if preset is not None and preset[0] is space:
            return preset[1]
        declare = _FAMILIES.get(m.get("kind"))
        if declare is None:
            raise SupernetError(f"space {space.name!r} has no torch model (model kind {m.get('kind')!r})")
        if len(_PRESETS) >= 256:  # sweeps make many spaces: keep the cache bounded (oldest first out)
            _PRESETS.pop(next(iter(_PRESETS)))
        _PRESETS[id(space)] = (space, declare(space))
        return _PRESETS[id(space)][1]
    hit = _BY_ID.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    if "source" in m:
        sn = load_spec(str(m["source"]), probe=False)
    else:
        payload = getattr(m, "payload", None)
        if payload is None:
            raise SupernetError(f"space {space.name!r}: the supernet was defined in another process and did not "
                                "travel with the space; pass a module:function")
        key = hashlib.sha256(payload).hexdigest()
        if key not in _CACHE:
            import cloudpickle

            _CACHE[key] = cloudpickle.loads(payload)
        sn = _CACHE[key]
    _BY_ID[id(m)] = (m, sn)
    return sn


def to_space(obj: Any) -> SearchSpace | None:
    """The space resolver hooked into ``naspipe.spaces.space.resolve_space``: a Supernet or a ``module:function``."""
    if isinstance(obj, Supernet):
        from naspipe.supernet.validate import probe_supernet

        probe_supernet(obj)
        return space_of(obj)
    if isinstance(obj, str) and is_spec(obj) and not Path(obj).exists():
        return spec_space(obj)
    if isinstance(obj, str) and obj in _BY_NAME:
        return _BY_NAME[obj]
    return None


def spec_space(spec: str, costs: bool = True, probe: bool = True) -> SearchSpace:
    """The space of ``module:function``, with its profile when ``costs`` (the supernet's own, else the one
    ``naspipe profile`` stored beside the module); SupernetError (one line).

    ``probe=False`` (``naspipe simulate``, which reads names and costs only) calls the function but builds no
    candidate: probing builds and runs every one, minutes for a block of thousands of cells."""
    sn = load_spec(spec, probe=probe)
    if not costs:
        return space_of(sn.with_costs(None) if sn.costs is not None else sn, source=spec)
    default = default_costs_path(spec)
    if sn.costs is None and default is not None and default.is_file():  # where naspipe profile stores it
        sn = sn.with_costs(str(default))
    return space_of(sn, source=spec)


def without_costs(obj: Any) -> Any:
    """What to measure costs of: ``obj`` without the profile it would read (a stale one must not stop its own
    re-measurement): a Supernet without ``costs``, a ``module:function`` as its space without costs."""
    if isinstance(obj, Supernet):
        return obj.with_costs(None) if obj.costs is not None else obj
    if isinstance(obj, str) and is_spec(obj) and not Path(obj).exists():
        return spec_space(obj, costs=False)
    return obj


register_resolver(to_space)


# ---- subnets as label dicts, for any space (presets too) -------------------------------------------------
def subnet_dict(space: SearchSpace, subnet: Sequence[int]) -> dict[str, str]:
    """``{label: candidate name}`` of ``subnet`` (choice blocks only)."""
    return space.subnet_dict(subnet)


def subnet_tuple(space: SearchSpace, subnet: Mapping[str, str] | Sequence[int]) -> tuple[int, ...]:
    """The tuple of indices of a label dict (a tuple or list of indices is validated and returned)."""
    if isinstance(subnet, Mapping):
        return space.subnet_from_dict(subnet)
    return space.validate_subnet(list(subnet))
