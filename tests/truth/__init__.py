"""Tests of ``naspipe.truth``: stand-alone training of every architecture."""
