"""Byte sizes and device-memory budgets as people type them: ``2GiB``, ``512MB``, ``1.5G``, ``25%``.

Command lines and configs name memory in human units; every consumer (the simulator's memory model,
``naspipe simulate``, the runtime's context cache) parses them here, so ``2G`` means the same thing
everywhere. Units: ``B``; decimal ``kB``/``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000); binary
``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of 1024). A bare ``K``/``M``/``G``/``T`` is binary (as in
``ulimit`` or torch). A plain number is bytes. A budget may instead be a share of the stage's supernet
parameters, written with a percent sign (``25%``), or ``unlimited``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from naspipe.errors import UserError

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


class SizeError(UserError):
    """A size or budget string could not be parsed; the message names the text and the accepted forms."""


def parse_bytes(text: str | int | float) -> int:
    """``"2GiB"`` -> 2147483648. Numbers pass through (rounded down to whole bytes). Never negative."""
    if isinstance(text, bool):
        raise SizeError(f"not a size: {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = text.strip()
        if s.startswith("-"):
            raise SizeError(f"a size must not be negative, got {text!r}")
        m = _SIZE_RE.match(s)
        if not m or m.group(2).lower() not in _UNITS:
            raise SizeError(f"cannot parse size {text!r}: use a number with an optional unit such as 512MB, "
                            "2GiB or 1.5G")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 0:
        raise SizeError(f"a size must be a finite number >= 0, got {text!r}")
    return int(value)


def format_bytes(n: float) -> str:
    """A short human form with binary units: ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class Budget:
    """A per-stage device budget: absolute ``nbytes``, a ``share`` of the stage's parameters, or unlimited."""

    nbytes: int | None = None
    share: float | None = None

    @property
    def unlimited(self) -> bool:
        return self.nbytes is None and self.share is None

    def resolve(self, stage_param_bytes: int) -> int | None:
        """Bytes for a stage whose supernet share holds ``stage_param_bytes``; None when unlimited."""
        if self.nbytes is not None:
            return self.nbytes
        if self.share is not None:
            return int(self.share * stage_param_bytes)
        return None

    def __str__(self) -> str:
        if self.nbytes is not None:
            return format_bytes(self.nbytes)
        if self.share is not None:
            return f"{100 * self.share:g}%"
        return "unlimited"


def parse_budget(text: str | int | float | Budget | None) -> Budget:
    """``"2GiB"`` -> Budget(nbytes=...); ``"25%"`` -> Budget(share=0.25); None/``unlimited`` -> unlimited."""
    if isinstance(text, Budget):
        return text
    if text is None:
        return Budget()
    if isinstance(text, str):
        s = text.strip().lower()
        if s in ("unlimited", "none", "inf"):
            return Budget()
        if s.endswith("%"):
            num = s[:-1].strip()
            try:
                pct = float(num)
            except ValueError:
                raise SizeError(f"cannot parse budget {text!r}: a share is a number followed by %, e.g. 25%") from None
            if not math.isfinite(pct) or pct <= 0:
                raise SizeError(f"a budget share must be a positive percentage, got {text!r}")
            return Budget(share=pct / 100.0)
    n = parse_bytes(text)
    if n <= 0:
        raise SizeError(f"a device budget must be positive, got {text!r}")
    return Budget(nbytes=n)
