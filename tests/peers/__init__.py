"""Tests of ``naspipe.peers``: the DDP peer."""
