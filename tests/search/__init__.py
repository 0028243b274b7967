"""Tests of ``naspipe.search``: architecture search on a trained supernet."""
