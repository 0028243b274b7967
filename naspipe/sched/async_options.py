"""Options of the asynchronous baselines (``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``), torch-free.

Written in the policy string after a colon, comma separated (the grammar of every policy,
``naspipe.sched.registry.parse_policy``; these are the baselines' declared ``Policy.options``):
``pipemare:t1=200,t2=0.1,warmup=20``, ``pipeoptim:offset=1``, ``2bw:8`` (a bare number sets the first
option). ``naspipe train --policy-option KEY=VALUE`` appends to it. The scheduler reads ``warmup``; the
stage's update rule (``naspipe.runtime.update_rules.async_rules``) reads the rest.

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

from naspipe.sched.registry import PolicyError, parse_policy

ASYNC_OPTIONS: dict[str, dict[str, type]] = {
    "pipedream": {"warmup": int, "vsync": int},
    "2bw": {"group": int},
    "pipemare": {"t1": int, "t2": float, "warmup": int, "tau": str},
    "pipeoptim": {"s": str, "offset": int, "warmup": int},
}
FLAGS = frozenset({"vsync"})  # options that may stand alone (meaning 1)


class AsyncOptionError(PolicyError):
    pass


def check_async_options(name: str, out: dict[str, object]) -> None:
    """The rules beyond types and signs (``Policy.check`` of the asynchronous baselines)."""
    for key, v in out.items():
        if key in ("s", "tau") and not (v in ("stage", "inflight") or str(v).isdigit()) or (
                key == "tau" and v == "inflight"):
            raise PolicyError(f"bad value {v!r} for {name} option {key!r}")
        if key == "t2" and not float(v) < 1:  # type: ignore[arg-type]
            raise PolicyError("pipemare t2 (decay D) must lie in [0, 1)")
        if key == "group" and v == 0:
            raise PolicyError("2bw group must be >= 1")


def parse_async_options(policy: str) -> dict[str, object]:
    """``{option: value}`` of an asynchronous policy string (``name`` or ``name:k=v,...``); ``{}`` for the
    other policies. Parsed by the one grammar of ``naspipe.sched.registry.parse_policy``."""
    if policy.partition(":")[0] not in ASYNC_OPTIONS:
        return {}
    try:
        return parse_policy(policy)[1]
    except PolicyError as e:
        raise AsyncOptionError(str(e)) from None
