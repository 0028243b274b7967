"""Tests of ``naspipe.supernet``: your own supernet, its probe, identity and refusals of bad user code."""
