"""Options of the asynchronous baselines (``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``), torch-free.

Written in the policy string after a colon, comma separated: ``pipemare:t1=200,t2=0.1,warmup=20``,
``pipeoptim:offset=1``, ``2bw:8`` (a bare number sets the first option). ``naspipe train
--policy-option KEY=VALUE`` appends to it. The scheduler reads ``warmup``; the stage's update rule
(``naspipe.runtime.async_rules``) reads the rest.

* ``2bw``: ``group`` (micro-batches per update; default: the number of stages).
* ``pipemare``: ``t1`` (T1 annealing steps K; 0 = off), ``t2`` (T2 decay D; 0 = off), ``warmup``
  (the first N subnets run synchronously, one at a time through the whole pipeline), ``tau``
  (``stage`` = P-1-i, or a number).
* ``pipeoptim``: ``offset`` (added to the version gap), ``s`` (``stage`` = P-1-i+offset per stage;
  ``inflight`` = per candidate, the in-flight earlier subnets on this stage that use it, + offset;
  or a fixed number), ``warmup``.
* ``pipedream``: ``warmup``; ``vsync`` (vertical sync: every stage reads version ``max(0, j-P+1)`` for
  subnet ``j``, the one stage 0 reads in steady 1F1B; deterministic, so the run is reproducible).
"""

from __future__ import annotations

ASYNC_OPTIONS: dict[str, dict[str, type]] = {
    "pipedream": {"warmup": int, "vsync": int},
    "2bw": {"group": int},
    "pipemare": {"t1": int, "t2": float, "warmup": int, "tau": str},
    "pipeoptim": {"s": str, "offset": int, "warmup": int},
}
FLAGS = frozenset({"vsync"})  # options that may stand alone (meaning 1)


class AsyncOptionError(ValueError):
    pass


def parse_async_options(policy: str) -> dict[str, object]:
    """``{option: value}`` of an asynchronous policy string (``name`` or ``name:k=v,...``)."""
    name, _, arg = policy.partition(":")
    spec = ASYNC_OPTIONS.get(name)
    if spec is None:
        return {}
    out: dict[str, object] = {}
    for item in filter(None, (a.strip() for a in arg.split(","))):
        key, sep, value = item.partition("=")
        if not sep:  # a bare flag (vsync) or the value of the first option (2bw:8)
            bare = item.replace("-", "_")
            if bare in spec and bare not in FLAGS:
                raise AsyncOptionError(f"{name} option {bare!r} needs a value: {bare}=VALUE")
            key, value = (item, "1") if bare in FLAGS else (next(iter(spec)), item)
        key = key.strip().replace("-", "_")
        if key not in spec:
            raise AsyncOptionError(f"policy {name!r} has no option {key!r}; options: {', '.join(spec)}")
        kind = spec[key]
        try:
            v: object = kind(value.strip())
        except ValueError:
            raise AsyncOptionError(f"bad value {value!r} for {name} option {key!r}") from None
        if isinstance(v, (int, float)) and v < 0:
            raise AsyncOptionError(f"{name} option {key!r} must be >= 0, got {v}")
        if key in ("s", "tau") and not (v in ("stage", "inflight") or str(v).isdigit()) or (
                key == "tau" and v == "inflight"):
            raise AsyncOptionError(f"bad value {v!r} for {name} option {key!r}")
        if key == "t2" and not float(v) < 1:  # type: ignore[arg-type]
            raise AsyncOptionError("pipemare t2 (decay D) must lie in [0, 1)")
        if key == "group" and v == 0:
            raise AsyncOptionError("2bw group must be >= 1")
        out[key] = v
    return out
