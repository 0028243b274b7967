"""A user's own scheduling policy, registered through the public API from a module outside ``naspipe/``.

``csp-newest`` is CSP with another tie-break among ready forwards: the *newest* free subnet first instead of
the oldest. It keeps the causal rule (a forward runs only when every earlier conflicting write is done), so
its runs must be bit-identical to the sequential reference. Used by ``tests/sched/test_policy_registry.py`` as
``--policy user_policies:csp-newest``.
"""

from __future__ import annotations

import heapq

import naspipe
from naspipe.sched.policies import CSPScheduler
from naspipe.sched.tasks import FORWARD, Task


class NewestFirstCSP(CSPScheduler):
    name = "csp-newest"

    def _pop_forward(self) -> Task | None:
        allowed = [j for j in self._f_ready if self._forward_allowed(j)]
        if not allowed:
            return None
        j = max(allowed)
        self._f_ready.remove(j)
        heapq.heapify(self._f_ready)
        self._arrived.discard(j)
        return self._task(FORWARD, j)


POLICY = naspipe.register_policy(naspipe.Policy("csp-newest", NewestFirstCSP, causal=True,
                                                doc="CSP, newest ready forward first"))
