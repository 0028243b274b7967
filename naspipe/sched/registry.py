"""One ``Policy`` object per scheduling policy, and the registry that names them (torch-free).

Why it exists: a policy's knowledge used to be spread over string tests in half a dozen modules. Here it is
declared once: its name, the scheduler class each stage runs, whether it follows the causal rule (so the
causal lower bound binds it and ``naspipe verify`` must hold against the reference), the key of its update
rule (``naspipe.runtime.update_rules.rules`` maps keys to torch code, so this module stays torch-free), how many subnets
it keeps in flight on a stage (for the memory plan), and which features it supports (checkpoints, context
switching, delayed shared layers, data-parallel replicas).

``register_policy(Policy(...))`` adds one, from any module; ``get_policy("bsp:8")`` returns the ``Policy`` of a
policy string (the name before the colon); ``policy_settings("bsp:8")`` the options its schedulers are built
with, checked by the declaration alone (what ``make_scheduler`` builds with, and what a run's configuration
checks). An unknown name fails loudly (``PolicyError``, one line) - there is no fallback.

Processes: a policy registered from a user's module must exist in every stage process too. ``register_policy``
records that module in ``NASPIPE_POLICY_MODULES`` (inherited by the processes it starts); a lookup that misses
imports those modules once and looks again. ``load_policy_spec("my_module:my-policy")`` imports ``my_module``
(which registers its policies) and returns the policy text (what ``--policy MODULE:NAME`` does).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field

from naspipe.errors import UserError
from naspipe.lifecycle import user_modules

ENV = "NASPIPE_POLICY_MODULES"
UPDATE_RULES = ("exact", "group", "stashed", "async")  # keys understood by naspipe.runtime.update_rules.rules


class PolicyError(UserError):
    pass


@dataclass(frozen=True)
class Policy:
    """A scheduling policy, declared once.

    * ``scheduler``: the ``StageScheduler`` subclass each stage runs (``naspipe.sched.policies``);
    * ``causal``: follows the causal rule (reads exactly what sequential training reads), so its traces must
      pass ``check_causal`` and its runs must verify against the reference;
    * ``updates``: the update rule's key: ``exact`` (one write per subnet, in causal order), ``group`` (GPipe:
      one write per group), ``stashed`` (1F1B weight stashing), ``async`` (the asynchronous baselines);
    * ``in_flight``: subnets the policy keeps in flight on a stage at full speed, for the memory plan:
      ``one`` (the admission gate adapts it; the CSP family), ``pipeline`` (``P - s``: 1F1B), ``group`` (the
      ``M`` micro-batches of a BSP group);
    * ``checkpoints``, ``context_switch``, ``delayed_shared``, ``replicas``: what the runtime supports with it;
    * ``options``: the options written after the colon (``name -> type``; ``bsp:8`` sets the first, ``pipemare:
      t1=200,t2=0.1`` by name), ``flags`` those that may stand alone, ``check(name, options)`` further rules
      (raises ``PolicyError``). One grammar for every policy: ``parse_policy``.
    """

    name: str
    scheduler: type
    causal: bool
    updates: str = "exact"
    in_flight: str = "one"
    checkpoints: bool = True
    context_switch: bool = False
    delayed_shared: bool = True
    replicas: bool = False
    doc: str = ""
    options: Mapping[str, type] = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    check: Callable[[str, dict[str, object]], None] | None = None

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or "," in self.name or self.name != self.name.strip().lower():
            raise PolicyError(f"bad policy name {self.name!r}: lower case, no ':' or ','")
        if self.updates not in UPDATE_RULES:
            raise PolicyError(f"policy {self.name!r}: unknown update rule {self.updates!r}; "
                              f"choose one of {', '.join(UPDATE_RULES)}")
        if self.in_flight not in ("one", "pipeline", "group"):
            raise PolicyError(f"policy {self.name!r}: in_flight must be one, pipeline or group")
        if self.causal and self.updates != "exact":
            raise PolicyError(f"policy {self.name!r}: a causal policy writes exactly (updates='exact')")


_REGISTRY: dict[str, Policy] = {}
_IMPORTED: set[str] = set()


def register_policy(policy: Policy, *, replace: bool = False) -> Policy:
    """Add ``policy`` to the registry (``replace=True`` to redefine a name; registering the same object or an
    equal one again is a no-op, so a module may be imported twice). Returns it."""
    if not isinstance(policy, Policy):
        raise PolicyError(f"register_policy takes a naspipe Policy, not {type(policy).__name__}")
    if not (isinstance(policy.scheduler, type) and callable(getattr(policy.scheduler, "next_task", None))):
        raise PolicyError(f"policy {policy.name!r}: scheduler must be a StageScheduler subclass")
    taken = scheduler_options(policy.scheduler)
    unread = set(policy.options) - taken
    if unread and not getattr(policy.scheduler, "text_options", False):  # they would be parsed, then dropped
        raise PolicyError(f"policy {policy.name!r}: options {sorted(unread)} are declared but its scheduler "
                          f"{policy.scheduler.__name__} takes only {sorted(taken)} (its constructor's keywords)")
    old = _REGISTRY.get(policy.name)
    if old is not None and old != policy and not replace:
        raise PolicyError(f"policy {policy.name!r} is already registered; pass replace=True to redefine it")
    _REGISTRY[policy.name] = policy
    user_modules.record(ENV, policy.scheduler.__module__)
    return policy


def unregister_policy(name: str) -> Policy:
    """Remove a registered policy (tests, notebooks redefining one); PolicyError if it is not registered."""
    try:
        return _REGISTRY.pop(name)
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}") from None


def _import_recorded() -> None:
    for module in user_modules.recorded(ENV):
        if module not in _IMPORTED:
            _IMPORTED.add(module)
            importlib.import_module(module)


def get_policy(text: str) -> Policy:
    """The ``Policy`` of a policy string (``csp``, ``bsp:8``, ``pipemare:t1=4``); PolicyError if unknown."""
    name = str(text).partition(":")[0].strip()
    policy = _REGISTRY.get(name)
    if policy is None:
        _import_recorded()
        policy = _REGISTRY.get(name)
    if policy is None:
        raise PolicyError(f"unknown policy {text!r}; choose one of {', '.join(_REGISTRY)}")
    return policy


def parse_policy(text: str) -> tuple[Policy, dict[str, object]]:
    """The ``Policy`` of a policy string and its options, parsed with the one grammar: ``name[:OPTIONS]``,
    OPTIONS comma separated ``key=value`` (``-`` may stand for ``_``), a bare value setting the first option,
    a bare flag meaning 1. PolicyError (one line) on an unknown name, option or bad value, or an option given
    twice."""
    policy = get_policy(text)
    name, _, arg = str(text).partition(":")
    name, spec = name.strip(), policy.options
    out: dict[str, object] = {}
    items = [a.strip() for a in arg.split(",") if a.strip()]
    if items and not spec:
        raise PolicyError(f"policy {name!r} takes no argument")
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:  # a bare flag (vsync) or the value of the first option (bsp:8, 2bw:8)
            bare = item.replace("-", "_")
            if bare in spec and bare not in policy.flags:
                raise PolicyError(f"{name} option {bare!r} needs a value: {bare}=VALUE")
            key, value = (item, "1") if bare in policy.flags else (next(iter(spec)), item)
        key = key.strip().replace("-", "_")
        if key not in spec:
            raise PolicyError(f"policy {name!r} has no option {key!r}; options: {', '.join(spec)}")
        if key in out:  # recorded as given, "plan=1,plan=7" would name two plans for one run
            raise PolicyError(f"{name} option {key!r} is given twice ({', '.join(items)}); give each option once")
        try:
            v: object = spec[key](value.strip())
        except ValueError:
            raise PolicyError(f"bad value {value!r} for {name} option {key!r}") from None
        out[key] = v
    _rules(policy, name, out)
    return policy, out


def check_options(policy: Policy, options: Mapping[str, object]) -> dict[str, object]:
    """Options given as Python values (``make_scheduler``'s keywords, ``SimOptions.policy_options``) checked
    against ``policy``'s declaration, the rules of the text grammar: the policy's own ``check`` first, then
    each value of its declared type (an int stands for a float), then signs. PolicyError (one line)."""
    out = dict(options)
    _rules(policy, policy.name, out, typed=True)
    return out


def policy_settings(policy: str, **options: object) -> dict[str, object]:
    """The options a stage's scheduler of ``policy`` (a policy string: ``bsp:8``, ``csp-bw``) is built with,
    checked by the policy's declaration (``Policy.options``, ``Policy.check``) without building one: ``options``
    as Python values (None: not given; ``micro_batches``, ``max_pending_w``), those in the string winning, the
    scheduler's own defaults for the rest (``bsp``: 4 micro-batches). Options the scheduler does not take go to
    the update rule (the asynchronous baselines) and are not returned. PolicyError (one line)."""
    pol, text = parse_policy(policy)  # the one grammar
    taken = scheduler_options(pol.scheduler) & set(pol.options)
    given = {k: v for k, v in options.items() if v is not None}
    bad = set(given) - taken
    if bad:
        raise PolicyError(f"policy {pol.name!r} takes no option {sorted(bad)}")
    return {**_defaults(pol.scheduler, taken), **check_options(pol, given),
            **{k: v for k, v in text.items() if k in taken}}


def micro_batches_of(policy: str, **options: object) -> int | None:
    """The subnets one update of ``policy`` groups (``bsp``'s micro-batches, as ``policy_settings`` reads them),
    or None for a policy that writes once per subnet. PolicyError (one line)."""
    settings = policy_settings(policy, **options)
    if get_policy(policy).updates != "group":
        return None
    m = settings.get("micro_batches")
    return m if isinstance(m, int) else None


def _defaults(scheduler: type, names: set[str] | frozenset[str]) -> dict[str, object]:
    """The defaults of ``names`` in the constructors of ``scheduler`` (the most derived class's first)."""
    out: dict[str, object] = {}
    for c in scheduler.__mro__:
        for p in _init_parameters(c):
            if p.name in names and p.name not in out and p.default is not p.empty:
                out[p.name] = p.default
    return out


@functools.cache
def _init_parameters(cls: type) -> tuple[inspect.Parameter, ...]:
    """The parameters of the ``__init__`` that ``cls`` itself defines (none for ``object`` or a class without one),
    read once per class: every scheduler a simulation makes asks (a plan choice simulates up to 200 runs)."""
    init = cls.__dict__.get("__init__")
    if init is None or cls is object:
        return ()
    return tuple(inspect.signature(init).parameters.values())


def _rules(policy: Policy, name: str, out: dict[str, object], typed: bool = False) -> None:
    if policy.check is not None:  # the policy's own rule first (bsp:-3 and bsp:0 are refused alike, ">= 1")
        policy.check(name, out)
    for key, v in out.items():
        want = policy.options[key]
        if typed and not (type(v) is want or want is float and type(v) is int):
            raise PolicyError(f"bad value {v!r} for {name} option {key!r}")
        if isinstance(v, (int, float)) and v < 0:
            raise PolicyError(f"{name} option {key!r} must be >= 0, got {v}")


def scheduler_options(scheduler: type) -> frozenset[str]:
    """The options a scheduler class takes: its constructors' keyword parameters beyond those of every
    scheduler (spec, stream, window, start, fence)."""
    names = {p.name for c in scheduler.__mro__ for p in _init_parameters(c)
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(names - {"self", "spec", "stream", "window", "start", "fence"})


def whole_numbers_from_one(name: str, options: dict[str, object]) -> None:
    """A ``Policy.check``: every option is a whole number >= 1 (``bsp:M``, ``csp-bw:N``)."""
    for key, v in options.items():
        if type(v) is not int or v < 1:
            raise PolicyError(f"bad policy argument in {name}: {key} must be a whole number >= 1, got {v!r}")


def load_policy_spec(text: str) -> str:
    """``MODULE:NAME[:OPTIONS]`` imports MODULE (which registers NAME) and returns ``NAME[:OPTIONS]``; a policy
    string whose name is registered is returned unchanged."""
    head, sep, rest = str(text).partition(":")
    if not sep or head in _REGISTRY or not rest:
        return text
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what the module prints must not mix into --json output
            importlib.import_module(head)
    except ImportError as e:
        raise PolicyError(f"policy {text!r}: {head!r} is neither a policy nor an importable module ({e})") from None
    except Exception as e:  # noqa: BLE001 - the user's module: one line, not a traceback
        raise PolicyError(f"policy {text!r}: importing module {head!r} raised {type(e).__name__}: {e}") from None
    get_policy(rest)
    return rest


def policy_names() -> list[str]:
    """Registered policy names, in registration order (the built-ins first)."""
    return list(_REGISTRY)


class SchedulerTable(MutableMapping[str, type]):
    """``{name: scheduler class}``, a live view of the registry (what ``POLICIES`` used to be).

    Assigning a class registers a ``Policy`` for it (causal when it derives from the CSP scheduler, exact
    updates): the old way tests patched ``POLICIES``. Deleting keeps the ``Policy`` aside, so putting the same
    class back restores it with its declared features (``mock.patch.dict`` clears and refills the mapping).
    """

    _removed: dict[str, Policy] = {}

    def __getitem__(self, name: str) -> type:
        try:
            return _REGISTRY[name].scheduler
        except KeyError:
            raise KeyError(name) from None

    def __setitem__(self, name: str, scheduler: type) -> None:
        kept = self._removed.pop(name, None) or _REGISTRY.get(name)
        if kept is not None and kept.scheduler is scheduler:
            _REGISTRY[name] = kept
            return
        causal = any(c.__name__ == "CSPScheduler" and c.__module__ == "naspipe.sched.csp"
                     for c in scheduler.__mro__)
        register_policy(Policy(name, scheduler, causal=causal), replace=True)

    def __delitem__(self, name: str) -> None:
        self._removed[name] = _REGISTRY.pop(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __contains__(self, name: object) -> bool:
        return name in _REGISTRY


__all__ = ["ENV", "Policy", "PolicyError", "SchedulerTable", "check_options", "get_policy", "load_policy_spec",
           "micro_batches_of", "parse_policy", "policy_names", "policy_settings", "register_policy",
           "scheduler_options", "unregister_policy", "whole_numbers_from_one"]
