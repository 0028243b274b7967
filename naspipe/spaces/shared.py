"""Shared-layer policies: how fixed blocks (embeddings, norms, output head) take part in the causal rule.

Every subnet uses every fixed block, so under the exact rule each subnet writes them and conflicts with
every earlier one. The user picks the semantics explicitly:

* ``frozen``: fixed blocks are never updated (what the NASPipe artifact silently does); no ordering;
* ``serial``: the exact rule; ``F(j,s)`` waits for every earlier write on a stage with fixed blocks;
* ``delayed:D``: subnet ``j`` reads the shared weights as they were after subnet ``j-D-1``'s update, a
  version that depends on ``j`` alone, so runs stay reproducible. ``serial`` is ``delayed:0``.

Corrections of the staleness of ``delayed:D``, appended with ``+`` (``delayed:4+predict+t1=200``); both keep
the run a function of ``j`` alone, so ``verify`` still holds against the reference, which implements them too:

* ``+predict`` (PipeOptim, ``s = D``): subnet ``j`` reads ``v_{j-D} - lr * D * dW`` instead of ``v_{j-D}``,
  ``dW`` the optimizer's step direction (``naspipe.corrections.pipeoptim``) computed from the optimizer
  state and the last applied gradient *when ``v_{j-D}`` is snapshotted* (right after subnet ``j-D-1``'s
  shared update), never at forward time. ``v_0`` is not moved (no optimizer state yet).
* ``+t1=K`` (PipeMare T1, ``tau = D``): the shared-layer update of subnet ``j`` uses the step size
  ``lr * t1_multiplier(j, D, K)``: ``lr / D`` at first, the base rate from subnet ``K`` on. Candidates keep
  their rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from naspipe.errors import UserError


class SharedPolicyError(UserError):
    pass


@dataclass(frozen=True)
class SharedLayers:
    mode: str = "frozen"  # "frozen" | "serial" | "delayed"
    delay: int = 0
    predict: bool = False  # +predict: read a PipeOptim prediction of the shared weights (s = D)
    t1: int = 0  # +t1=K: PipeMare T1 on the shared-layer step size (tau = D, anneal over K updates); 0 = off

    @property
    def trains_shared(self) -> bool:
        return self.mode != "frozen"

    @property
    def gate(self) -> int | None:
        """``F(j,s)`` on a stage with fixed blocks needs every write ``i <= j - gate - 1`` done; None = free."""
        return None if self.mode == "frozen" else self.delay

    def version_read(self, j: int) -> int:
        """Number of shared-layer updates subnet ``j`` sees (``v_k`` = after updates of subnets < k)."""
        if self.mode == "frozen":
            return 0
        return max(0, j - self.delay)

    def __str__(self) -> str:
        base = self.mode if self.mode != "delayed" else f"delayed:{self.delay}"
        return base + ("+predict" if self.predict else "") + (f"+t1={self.t1}" if self.t1 else "")


SHARED_MODES: tuple[str, ...] = ("auto", "frozen", "serial", "delayed:D")  # the forms people type (+ corrections)
AUTO = "auto"  # the default: the space's own (``default_for``)
USER_SUPERNET_KIND = "supernet"  # a space's ``model.kind`` for a user's naspipe.Supernet (naspipe.models.stage)


def default_for(space: Any) -> str:
    """What ``auto`` means for ``space``: ``serial`` for a user's own ``naspipe.Supernet`` (its Fixed stem and
    head train, exactly as the reference trains them), ``frozen`` for the presets (the NASPipe paper's setting:
    with every subnet writing the stem, ``serial`` serialises the whole pipeline; ``benchmarks/shared_layers.py``,
    ``docs/your-supernet-notes.md``)."""
    model = getattr(space, "model", None) or {}
    return "serial" if model.get("kind") == USER_SUPERNET_KIND else "frozen"


def resolve_shared(text: str | SharedLayers, space: Any) -> SharedLayers:
    """``parse_shared``, with ``auto`` resolved for ``space`` (``default_for``)."""
    if isinstance(text, str) and text.strip().lower() == AUTO:
        return parse_shared(default_for(space))
    return parse_shared(text)


MAX_DELAY = 100_000  # far beyond any window; a larger D is a typo, not a policy


def parse_shared(text: str | SharedLayers) -> SharedLayers:
    """``frozen``, ``serial``, ``delayed:D`` (``+predict``, ``+t1=K``) as a ``SharedLayers``; SharedPolicyError
    (one line) for anything else."""
    if isinstance(text, SharedLayers):
        return text
    if not isinstance(text, str):
        raise SharedPolicyError(f"shared layers must be frozen, serial or delayed:D (a string or a SharedLayers), "
                                f"got {text!r}")
    t, *extras = [x.strip() for x in text.strip().lower().split("+")]
    if extras:
        base = parse_shared(t)
        if base.mode != "delayed":
            raise SharedPolicyError(f"bad shared-layer policy {text!r}: +predict and +t1=K apply to delayed:D only")
        predict, t1 = False, 0
        for x in extras:
            key, sep, val = x.partition("=")
            if x == "predict":
                predict = True
            elif key == "t1" and sep and val.isdigit() and int(val) > 0:
                t1 = int(val)
            else:
                raise SharedPolicyError(f"bad shared-layer correction {x!r} in {text!r}: use +predict or +t1=K "
                                        f"with a whole number K >= 1")
        return SharedLayers("delayed", base.delay, predict, t1)
    if t == "frozen":
        return SharedLayers("frozen")
    if t == "serial":
        return SharedLayers("serial", 0)
    if t.startswith("delayed"):
        _, sep, d = t.partition(":")
        if not sep or not d.strip().isdigit():
            raise SharedPolicyError(f"bad shared-layer policy {text!r}: use delayed:D with a whole number D >= 0")
        if int(d) > MAX_DELAY:
            raise SharedPolicyError(f"bad shared-layer policy {text!r}: the delay D must lie in 0..{MAX_DELAY} "
                                    "(a delay beyond the subnets in flight only makes the shared layers staler)")
        return SharedLayers("delayed", int(d))
    raise SharedPolicyError(f"unknown shared-layer policy {text!r}; choose frozen, serial or delayed:D "
                            f"(optionally +predict, +t1=K)")


def short_list(labels: list[str] | tuple[str, ...]) -> str:
    """The first three labels, then how many more: a line stays a line for a space with many fixed blocks."""
    return ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")


def start_line(fixed: list[str] | tuple[str, ...], shared: SharedLayers | str,
               how: str = "--shared-layers") -> str | None:
    """The one line a run prints at start: which semantics the fixed blocks ``fixed`` (labels) follow and how to
    change it (``how``: ``--shared-layers`` on the command line, ``shared_layers=`` from Python); None when the
    space has no fixed block (nothing to say)."""
    if not fixed:
        return None
    sh = parse_shared(shared)
    names = short_list(fixed)
    if sh.mode == "frozen":
        what = "never trained (they keep their initial weights)"
    elif sh.mode == "serial":
        what = "trained in sequence order"
    else:
        what = f"trained, subnet j reading them as after subnet j-{sh.delay + 1}'s update"
        what += " (predicted forward)" if sh.predict else ""
    others = "|".join(x for x in ("serial", "frozen", "delayed:D") if x != sh.mode)
    sep = "" if how.endswith("=") else " "
    return f"naspipe: shared layers ({names}): {sh} - {what}; {how}{sep}{others} to change"


def announce(space: object, shared: SharedLayers | str, how: str = "--shared-layers") -> None:
    """Print ``start_line`` for ``space`` (its fixed blocks' labels) to stderr, when it has fixed blocks."""
    import sys

    line = start_line([b.name for b in getattr(space, "blocks", ()) if b.fixed], shared, how)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
