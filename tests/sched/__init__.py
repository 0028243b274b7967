"""Tests of ``naspipe.sched``: the scheduling policies, their tables, choices and properties (torch-free)."""
