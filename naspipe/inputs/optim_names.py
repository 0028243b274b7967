"""Optimizer names, default learning rates and which rates can train, without torch, so the CLI can validate before
importing it."""

from __future__ import annotations

OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam", "adamw", "rmsprop")
# tried on both presets with uniform sampling (800 subnets); digits reaches ~0.75 held-out accuracy
DEFAULT_LR: dict[str, float] = {"sgd": 0.2, "momentum": 0.02, "adam": 3e-3, "adamw": 3e-3, "rmsprop": 1e-3}

LR_MAX = 3.4028234663852886e38  # float32's largest: a larger rate overflows in the first update of float32 weights
# float32's smallest normal number: a smaller rate is subnormal in float32 (1e-320 is: it trains nothing)
# and flushes to zero where denormals are off: a run that trains nothing
LR_MIN = 1.1754943508222875e-38


def lr_or_default(optimizer: str, lr: float | None) -> float:
    """The learning rate a run of ``optimizer`` trains with: ``lr``, or the optimizer's default when None."""
    return DEFAULT_LR[optimizer] if lr is None else lr


def lr_error(lr: object) -> str | None:
    """Why ``lr`` cannot be a learning rate (None: it can): a finite number > 0 that fits a float32 as a normal
    number (from ``LR_MIN`` to ``LR_MAX``)."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr <= LR_MAX:
        return f"must be a finite number > 0 and at most {LR_MAX:.4g} (float32's largest), got {lr!r}"
    if lr < LR_MIN:
        return (f"must be at least {LR_MIN:.4g} (float32's smallest normal number: a smaller rate is subnormal in "
                f"the float32 weights' updates, or zero), got {lr!r}")
    return None
