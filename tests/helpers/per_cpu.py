"""Recorded bits belong to a kind of CPU: digests of trained parameters are kept per CPU.

Why it exists: torch's CPU kernels and MKL choose their vector code by the CPU they run on (AVX-512 or AVX2,
Intel or AMD), and a sum taken in another order differs in its last bits. A run is reproduced bit for bit on
the same machine (what ``naspipe verify`` checks, parallel against the sequential reference); a digest recorded
on one kind of CPU is not reached on another. The golden-digest tests (the presets and ``--replicas 1`` train
as before) failed on a fresh clone on an AMD EPYC with AVX2 although the code before the change they guard,
run on that machine, gives exactly what today's code gives there (checked by running the old commits'
``naspipe reference``). So each table holds one set of digests per CPU; ``EARLIER`` is the machine the first
ones were recorded on (its CPU was not written down), and any CPU without its own set is held to those.

To record a new CPU's set, run the command each table names from the commit it names *and* from today's code
on that machine; only where the two agree is the digest a record of "as before".
"""

from __future__ import annotations

import functools
from pathlib import Path

EARLIER = "the project's first 2-core x86_64 machine (2026-11/12; its CPU was not recorded)"
AMD_EPYC_AVX2 = "AuthenticAMD AMD EPYC, torch CPU capability AVX2"
OTHERS = (AMD_EPYC_AVX2,)  # the CPUs with records of their own


@functools.cache
def cpu_key() -> str:
    """``<vendor> <model name>, torch CPU capability <X>``: what decides which kernels torch and MKL run."""
    import torch

    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("vendor_id", "model name"):
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = " ".join(info.get(k, "?") for k in ("vendor_id", "model name"))
    return f"{name}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"


def for_this_cpu(table: dict[str, dict[str, str]]) -> dict[str, str]:
    """The digests recorded on this kind of CPU, or ``EARLIER``'s where none were."""
    return table.get(cpu_key(), table[EARLIER])


def same_cpu(recorded_on: str) -> bool:
    """Whether a record made on ``recorded_on`` is to be met bit for bit here (a CPU not in ``OTHERS`` is taken
    to be ``EARLIER``'s kind, as above)."""
    here = cpu_key()
    return here == recorded_on or (recorded_on == EARLIER and here not in OTHERS)
