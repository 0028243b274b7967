"""Which CPU kernels a run's processes compute with: a named recipe, applied before torch chooses its kernels.

Why it exists: torch's own vector kernels (ATen), oneDNN (convolutions) and MKL (matrix products) each pick
their code by the CPU they run on, and a sum taken in another order differs in its last bits. A run is then
bit-identical to its reference only on the same kind of CPU. Each library takes a cap from the environment,
read when it first computes (not when torch is imported), so a process that sets the caps before its first
tensor operation computes as a process of the capped kind does:

* ``native``: no cap; the fastest code this CPU has; the same bits only on the same kind of CPU;
* ``avx2``: ATen and oneDNN capped at AVX2 and MKL held to its AVX2 branch: the same bits on every x86-64 CPU
  with AVX2 of one vendor (MKL takes other paths on Intel and AMD CPUs);
* ``portable``: ATen and oneDNN capped at AVX2 and MKL in its conditional-numerical-reproducibility mode
  ``COMPATIBLE`` (one code path for its matrix products on every x86-64 CPU): the same bits across vendors,
  except where torch computes a function with MKL's vector math (a square root: ``vendor_bound``).

What each kind costs and which bits agree where: docs/reproducibility.md and ``benchmarks/kernels.py``.

A process cannot change its kernels once it has computed, and nothing in torch says which caps it started
with. So naspipe's own processes (a command, a stage, a torchrun rank, a truth worker) apply the recipe at
their start (``enter``), and a process that did not start that way (a notebook's kernel, a script) is taken to
run a kind only when its environment holds that kind's recipe exactly and torch's capability is the one the
recipe gives (``in_force``); otherwise the work goes to fresh processes. No torch is imported here except to
read the capability in force.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from naspipe.errors import UserError

NATIVE, AVX2, PORTABLE = "native", "avx2", "portable"
KINDS = (NATIVE, AVX2, PORTABLE)
DEFAULT = NATIVE  # chosen by measurement: benchmarks/kernels.py (docs/reproducibility.md)
# the variables each kind sets; every variable any kind sets is cleared first (a stray one is another kind)
RECIPES: dict[str, dict[str, str]] = {
    NATIVE: {},
    AVX2: {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    PORTABLE: {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
}
MANAGED = tuple(sorted({k for r in RECIPES.values() for k in r}))
# Optimizers whose step takes a square root. torch computes a float square root on the CPU with MKL's vector math
# (ATen/cpu/vml.h; so too exp, log, tanh, erf, sin, cos and others), whose code follows the CPU's vendor under every
# cap and MKL_CBWR value (measured, docs/reproducibility.md: on an AMD EPYC it is not correctly rounded and no
# setting changes it; an entry of the MNIST-1D truth trained with adam under portable kernels ends in other bits
# there than on the Intel Xeon that built it, while the forward and backward at the initial weights agree).
SQRT_OPTIMIZERS = frozenset({"adam", "adamw", "rmsprop"})
CAPPED_AT = "AVX2"  # torch's capability under avx2 and portable


class KernelsError(UserError):
    """A kernels kind that cannot be had here, or a process already computing under another (one line)."""


def kind_error(kind: object) -> str | None:
    """Why ``kind`` is not a kernels kind this machine can run (None when it is)."""
    if kind not in KINDS:
        return f"unknown kernels kind {kind!r}; one of {', '.join(KINDS)}"
    if kind != NATIVE and not cpu_has_avx2():
        return (f"--kernels {kind} needs an x86-64 CPU with AVX2 and FMA; this one ({cpu_name()}, "
                f"{platform.machine()}) has none: use --kernels native")
    return None


def check(kind: object) -> str:
    """``kind`` if this machine can run it, else KernelsError."""
    why = kind_error(kind)
    if why is not None:
        raise KernelsError(why)
    return str(kind)


def vendor_of(cpu: str | None) -> str | None:
    """The vendor of a recorded ``cpu_name()`` (``GenuineIntel Intel(R) Xeon(R) Processor``: ``GenuineIntel``), or
    of what a run or truth says it computed on (``portable AVX2 on GenuineIntel ...``); None when not recorded."""
    if not cpu or "(CPU not recorded)" in cpu:
        return None
    if cpu.split(" ", 1)[0] in KINDS and " on " in cpu:  # what a run says: ``<kind> [<capability>] on <cpu>``
        cpu = cpu.split(" on ", 1)[1]
    return cpu.strip().split(" ", 1)[0] or None


def vendor_bound(kind: str, optimizer: str | None) -> bool:
    """Whether two runs under ``kind`` with ``optimizer`` agree bit for bit only on CPUs of one vendor (``avx2``;
    ``portable`` with an optimizer in SQRT_OPTIMIZERS); ``native`` agrees only on one kind of CPU."""
    return kind == AVX2 or (kind == PORTABLE and optimizer in SQRT_OPTIMIZERS)


def start_line(kind: str, optimizer: str | None) -> str | None:
    """The line a run prints at its start where its bits travel less far than its kind's name says (``portable``
    with an optimizer whose step takes a square root); None otherwise."""
    if kind == PORTABLE and optimizer in SQRT_OPTIMIZERS:
        return (f"naspipe: kernels portable with {optimizer}: the same bits only on CPUs of one vendor ({optimizer}'s "
                "square root follows the CPU's vendor; sgd and momentum avoid it: docs/reproducibility.md)")
    return None


def announce(kind: str, optimizer: str | None) -> None:
    """Print ``start_line`` to stderr, where there is one."""
    if (line := start_line(kind, optimizer)) is not None:
        print(line, file=sys.stderr, flush=True)


def environment(kind: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (``os.environ``) with ``kind``'s recipe in place of any cap it held."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in MANAGED}
    env.update(RECIPES[kind])
    return env


def _apply(kind: str, env: MutableMapping[str, str]) -> None:
    for k in MANAGED:
        env.pop(k, None)
    env.update(RECIPES[kind])


def recipe_kind(env: Mapping[str, str] | None = None) -> str | None:
    """The kind whose recipe ``env`` (``os.environ``) holds exactly, or None (caps of no kind)."""
    env = os.environ if env is None else env
    held = {k: env[k] for k in MANAGED if k in env}
    return next((k for k, r in RECIPES.items() if r == held), None)


_ENTERED: str | None = None  # the kind this process applied at its start (``enter``)


def enter(kind: str) -> None:
    """At the start of one of naspipe's own processes, before its first tensor operation: compute under
    ``kind`` from now on. (torch may be imported already: the caps are read at first use.)"""
    global _ENTERED
    check(kind)
    _apply(kind, os.environ)
    if "torch" in sys.modules and capability() != expected_capability(kind):
        raise KernelsError(f"this process computed with torch's {capability()} kernels before --kernels {kind} "
                           f"could apply; start it with {recipe_text(kind)} in its environment")
    _ENTERED = kind


def capability() -> str:
    """torch's CPU capability in force (``AVX512``, ``AVX2``, ``DEFAULT``, ...)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def in_force() -> str | None:
    """The kind this process computes under, or None when it cannot be told (caps of no kind, or torch's
    capability not the one the environment's recipe gives: the caps came after torch had computed)."""
    kind = recipe_kind()
    if kind is None:
        return None
    if _ENTERED == kind:
        return kind
    return kind if capability() == expected_capability(kind) else None


def runs_here(kind: str) -> bool:
    """Whether work under ``kind`` can run in this process (else it needs a fresh one)."""
    return in_force() == kind


def recipe_text(kind: str) -> str:
    """``ATEN_CPU_CAPABILITY=avx2 ...``, or for ``native``: none of the variables."""
    return " ".join(f"{k}={v}" for k, v in RECIPES[kind].items()) or f"none of {', '.join(MANAGED)}"


def require(kind: str, what: str) -> None:
    """KernelsError unless this process computes under ``kind`` (``what``: the work, for the message)."""
    here = in_force()
    if here != kind:
        raise KernelsError(f"{what} needs --kernels {kind}, but this process computes under {describe_here(here)}; "
                           f"start it from naspipe (its processes apply the kernels themselves) or with "
                           f"{recipe_text(kind)} in its environment")


def describe_here(here: str | None) -> str:
    if here is not None:
        return f"kernels {here} ({capability()})"
    held = {k: os.environ[k] for k in MANAGED if k in os.environ}
    shown = ", ".join(f"{k}={v}" for k, v in held.items()) or "no caps"
    return f"torch's {capability()} kernels with {shown}"


@contextmanager
def launching(kind: str) -> Iterator[None]:
    """Processes started inside (spawned, forked by a fork server started inside, a pool's workers) inherit
    ``kind``'s recipe; this process's own environment is restored after."""
    saved = {k: os.environ[k] for k in MANAGED if k in os.environ}
    _apply(kind, os.environ)
    try:
        yield
    finally:
        for k in MANAGED:
            os.environ.pop(k, None)
        os.environ.update(saved)


def in_fresh_process(kind: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a fresh interpreter that computes under ``kind`` (spawned with the recipe, ``enter``
    first): its result, or its exception raised here. ``fn`` and ``args`` travel with cloudpickle (a notebook's
    supernet among them). The child's output goes where this process's goes; it ends with this call (Ctrl-C
    here stops it)."""
    import multiprocessing as mp

    import cloudpickle

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    payload = cloudpickle.dumps((fn, args))
    from naspipe.lifecycle.mainless import start

    with launching(kind):
        proc = ctx.Process(target=_fresh_entry, args=(kind, payload, send), name=f"naspipe-kernels-{kind}")
        start(proc)  # (a script without a main guard is not run again in it)
    send.close()
    try:
        try:
            ok, value = recv.recv()  # (the work may take hours; a child that dies ends the wait: EOFError)
        except EOFError:
            proc.join(timeout=30)
            raise KernelsError(f"the process started for --kernels {kind} ended (exit code {proc.exitcode}) "
                               "before it answered") from None
    finally:
        if proc.is_alive():
            proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=10)
    if ok:
        return value
    raise cloudpickle.loads(value)


def _fresh_entry(kind: str, payload: bytes, conn: Any) -> None:
    import cloudpickle

    try:
        enter(kind)
        fn, args = cloudpickle.loads(payload)
        result: tuple[bool, Any] = (True, fn(*args))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
        try:
            result = (False, cloudpickle.dumps(e))
        except Exception:  # noqa: BLE001 - an exception that cannot travel travels as its line
            result = (False, cloudpickle.dumps(RuntimeError(f"{type(e).__name__}: {e}")))
    conn.send(result)
    conn.close()


# ---- the machine ------------------------------------------------------------------------------------
@cache
def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep:
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def cpu_name() -> str:
    """``<vendor> <model name>`` (``GenuineIntel Intel(R) Xeon(R) Processor``), or the platform's processor."""
    info = _cpuinfo()
    if "vendor_id" in info or "model name" in info:
        return " ".join(info[k] for k in ("vendor_id", "model name") if k in info)
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_vendor() -> str:
    return _cpuinfo().get("vendor_id", platform.machine() or "unknown")


def _flags() -> set[str]:
    return set(_cpuinfo().get("flags", "").split())


def cpu_has_avx2() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and {"avx2", "fma"} <= _flags()


def native_capability() -> str:
    """The capability torch picks on this CPU uncapped (its own rule: AVX-512 needs F, BW, VL and DQ)."""
    flags = _flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "AVX512"
    if cpu_has_avx2():
        return "AVX2"
    if sys.platform == "darwin" or platform.machine().lower() in ("arm64", "aarch64"):
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    return "DEFAULT"


def expected_capability(kind: str) -> str:
    """torch's CPU capability under ``kind`` on this CPU."""
    return native_capability() if kind == NATIVE else CAPPED_AT


def machine(kind: str) -> dict[str, str]:
    """What a run records beside its kernels kind: this CPU and torch's capability under the kind (every one of
    naspipe's processes checks at its start that it computes so: ``require``)."""
    return {"cpu": cpu_name(), "cpu_capability": expected_capability(kind)}


def cpu_key() -> str:
    """``<vendor> <model> (<native capability>)``: what decides native kernels' bits."""
    return f"{cpu_name()} ({native_capability()})"
