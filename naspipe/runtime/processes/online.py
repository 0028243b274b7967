"""Losses for run-time generated subnet streams in the multi-process runtime.

Why it exists: with ``--sampler evolution:LAG`` the subnet sequence is generated while the supernet trains
(``naspipe.sequences.samplers``): subnet ``j`` depends on the losses of subnets ``<= j - LAG``. Every stage builds its
own ``OnlineStream`` (same space, seed and sampler), so every stage must learn every loss, bit-exactly,
or the stages would generate different sequences.

Protocol:

* the last stage computes loss(j) in ``F(j)`` and reports it to its stream right after ``F(j)``;
* every gradient message of ``j`` (sent by ``B(j)`` from stage ``s`` to ``s - 1``) carries loss(j) as the
  bits of a float64 in its header (``naspipe.runtime.transport.comm.FLAG_LOSS``), also when the gradient itself is
  empty; stage ``s - 1`` reports it to its stream when the message arrives, before ``B(j)`` can run.
  So stage ``s`` knows loss(j) no later than ``B(j)``, and always exactly the float the last stage computed;
* after each report the stage calls ``StageScheduler.on_results()``, which admits the subnets that became
  generable (``OnlineStream.available()``: one past the newest reported contiguous loss, plus LAG).

Liveness: subnet ``j`` needs only losses of older subnets, whose training never waits for ``j``, so the
pipeline cannot deadlock; but stage 0 learns loss(j) only when ``B(j)`` reaches it, so with a LAG below the
number of subnets in flight (about 2 x stages) the first stages idle waiting for losses. Such a wait is an
ordinary inbox wait, bounded by the run's timeout (``StageTimeout`` says the stream was waiting for a loss).
"""

from __future__ import annotations

from typing import Any


class LossBook:
    """The losses one stage knows: reported to its stream (if run-time generated) and forwarded upstream."""

    def __init__(self, stream: Any, sched: Any):
        self.stream = stream
        self._report = getattr(stream, "report", None)  # only an OnlineStream takes results
        self._available = getattr(stream, "available", None)
        self.sched = sched
        self._pending: dict[int, float] = {}  # learned, not yet forwarded with the gradient
        self.learned = 0

    @property
    def online(self) -> bool:
        return self._report is not None

    def learn(self, j: int, loss: float | None) -> None:
        """Subnet ``j``'s loss became known on this stage (the last stage's ``F(j)`` or a gradient header)."""
        if loss is None:
            if self.online:
                raise RuntimeError(f"the gradient of subnet {j} arrived without its loss; a run-time generated "
                                   "stream needs every loss (mixed naspipe versions?)")
            return
        self._pending[j] = loss
        self.learned += 1
        if self._report is not None:
            self._report(j, loss)
            self.sched.on_results()

    def take(self, j: int) -> float | None:
        """The loss to send with ``j``'s gradient (forgotten afterwards)."""
        return self._pending.pop(j, None)

    def waiting(self) -> str:
        """Why admission may be held back (for a timeout message), or ''."""
        if self._available is None:
            return ""
        a = self._available()
        if a >= self.sched.n:
            return ""
        return (f"; its run-time generated stream can produce subnets < {a} only until the loss of subnet "
                f"{a - self.stream.sampler.lag} arrives (a lag below the subnets in flight makes "
                f"the pipeline wait for losses)")
