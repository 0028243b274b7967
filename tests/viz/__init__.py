"""Tests of ``naspipe.viz``: figures, reports and run digests."""
