"""Tests of ``naspipe.runtime``: multi-process training bit for bit against the reference, and its failures."""
