"""Tests of ``naspipe.corrections``: weight versions, PipeMare, PipeOptim and delayed SGD."""
