"""Tests of ``naspipe.sim``: the discrete-event simulator, its memory model and replicas."""
