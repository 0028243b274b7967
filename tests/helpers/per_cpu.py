"""Recorded bits belong to a kernels kind: golden digests are kept per kernels kind, not per CPU.

Why it exists: torch's CPU kernels, oneDNN and MKL choose their vector code by the CPU they run on (AVX-512 or
AVX2, Intel or AMD), so a digest recorded natively on one kind of CPU is not reached on another. Pinned kernels
(``naspipe.lifecycle.kernels``) make the bits a property of the kind instead: ``portable`` is one table for every
x86-64 CPU with AVX2 (the golden runs train with sgd: an optimizer with a square root would make it one table per
vendor, ``kernels.vendor_bound``); ``avx2`` is one table per CPU vendor (MKL takes other paths on Intel and AMD).
Each digest is what the commit a table names gives under that kind, checked equal to what today's code gives (the
kernels' caps are environment variables, so the old code runs under them unchanged).

``cpu_key`` and ``same_cpu`` remain for records made natively (``tests/runfolder/premove_runs``): those are met
bit for bit only on the kind of CPU that made them.
"""

from __future__ import annotations

import functools

from naspipe.lifecycle import kernels

PORTABLE = "portable"
RECORDED_ON = "GenuineIntel Intel(R) Xeon(R) Processor (AVX-512, AMX), 2026-12-06"


def avx2_key() -> str:
    """The avx2 table of this CPU's vendor."""
    return f"avx2 on {kernels.cpu_vendor()}"


def recorded(table: dict[str, dict[str, str]], kind: str) -> dict[str, str]:
    """The digests of ``kind`` that hold on this machine (``avx2``: its vendor's); KeyError names what is
    missing."""
    key = PORTABLE if kind == PORTABLE else avx2_key()
    if key not in table:
        raise KeyError(f"no record for {key!r}: run the table's command under --kernels {kind} here (from the "
                       "commit it names and from today's code; they must agree) and add it")
    return table[key]


@functools.cache
def cpu_key() -> str:
    """``<vendor> <model name>, torch CPU capability <X>``: what decides the bits of native kernels."""
    import torch

    return f"{kernels.cpu_name()}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"


def same_cpu(recorded_on: str) -> bool:
    """Whether a record made natively on ``recorded_on`` is to be met bit for bit here."""
    return cpu_key() == recorded_on
