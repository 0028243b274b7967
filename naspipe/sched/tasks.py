"""Tasks, the unit of scheduling: ``F(j,s)``, ``B(j,s)`` and, for the split backward, ``W(j,s)``.

``F`` is the forward of subnet ``j`` on stage ``s``; ``B`` its backward (with the weight update, unless
the backward is split); ``W`` the weight gradient plus update split off ``B``. A task is plain data.
"""

from __future__ import annotations

from typing import NamedTuple

FORWARD = "F"
BACKWARD = "B"
WEIGHT = "W"
KINDS = (FORWARD, BACKWARD, WEIGHT)


class Task(NamedTuple):
    kind: str
    subnet: int
    stage: int

    def __str__(self) -> str:
        return f"{self.kind}({self.subnet},{self.stage})"


def F(j: int, s: int) -> Task:  # noqa: N802 - reads like the paper's notation
    return Task(FORWARD, j, s)


def B(j: int, s: int) -> Task:  # noqa: N802
    return Task(BACKWARD, j, s)


def W(j: int, s: int) -> Task:  # noqa: N802
    return Task(WEIGHT, j, s)
