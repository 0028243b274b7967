"""The user's modules that registered a policy or a sampler, recorded in an environment variable so that the
processes naspipe starts (stages, torchrun ranks, truth workers) import them too and find what they registered.

Why it exists: a registry lives in one process; a child started by spawn or a fork server, or a torchrun rank,
begins without the user's imports. Both registries (``naspipe.sched.registry``, ``naspipe.sequences.samplers``)
record the module of what they register here, by one rule: naspipe's own modules and ``__main__`` (shipped by value
or refused elsewhere) are not recorded, and a module is recorded once, in registration order.
"""

from __future__ import annotations

import os


def record(env: str, module: str) -> None:
    """Add ``module`` to the comma-separated list in the environment variable ``env`` (once; not naspipe's own
    modules, not ``__main__``)."""
    if not module or module.startswith("naspipe.") or module == "__main__":
        return
    known = recorded(env)
    if module not in known:
        os.environ[env] = ",".join([*known, module])


def recorded(env: str) -> list[str]:
    """The modules recorded in ``env``, in registration order."""
    return [m for m in os.environ.get(env, "").split(",") if m]
