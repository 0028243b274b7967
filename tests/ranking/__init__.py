"""Tests of ``naspipe.ranking`` and ``naspipe rank``."""
