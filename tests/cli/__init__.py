"""Tests of ``naspipe.cli``: the ``naspipe`` commands, their output and their one-line refusals."""
