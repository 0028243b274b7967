"""Tests of ``naspipe.models``: supernet modules per stage and split training."""
