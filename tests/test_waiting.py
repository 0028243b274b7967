"""``tests.helpers.waiting.wait_until``, which every polling wait of the suite goes through: it returns what it
waited for, gives up at its deadline or when what it waits on has ended, and never waits past either."""

from __future__ import annotations

import itertools
import time

from tests.helpers.waiting import wait_until


def test_it_returns_the_first_truthy_value_as_soon_as_there_is_one():
    calls = itertools.count()
    t = time.monotonic()
    assert wait_until(lambda: [n] if (n := next(calls)) >= 3 else [], 30, every_s=0.01) == [3]
    assert time.monotonic() - t < 5


def test_it_gives_up_at_its_deadline_with_the_last_falsy_value():
    t = time.monotonic()
    assert wait_until(lambda: 0, 0.3, every_s=0.01) == 0
    assert 0.3 <= time.monotonic() - t < 5


def test_it_gives_up_when_what_it_waits_on_has_ended():
    t = time.monotonic()
    assert wait_until(lambda: None, 30, every_s=0.01, unless=lambda: True) is None
    assert time.monotonic() - t < 5
