"""A user's own scheduling policy, registered through the public API from a module outside ``naspipe/``.

``csp-newest`` is CSP with another tie-break among ready forwards: the *newest* free subnet first instead of
the oldest. It overrides only the public hook ``choose_forward``; the scheduler still decides which forwards
may run (the causal rule), so its runs must be bit-identical to the sequential reference. Used by
``tests/sched/test_policy_registry.py`` as ``--policy user_policies:csp-newest``.
"""

from __future__ import annotations

import naspipe


class NewestFirstCSP(naspipe.CSPScheduler):
    name = "csp-newest"

    def choose_forward(self, ready: tuple[int, ...]) -> int:
        return ready[-1]  # ready: the forwards the causal rule allows now, oldest first


POLICY = naspipe.register_policy(naspipe.Policy("csp-newest", NewestFirstCSP, causal=True,
                                                doc="CSP, newest ready forward first"))
