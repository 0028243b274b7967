"""The shared-layer policies as plain data (``naspipe.spaces.shared``): their grammar, their gates and the versions
subnets read. Torch-free, and part of the mutation benchmark's test set (``benchmarks/mutation.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from naspipe.spaces.shared import MAX_DELAY, SharedLayers, SharedPolicyError, parse_shared


def test_frozen_is_the_default_and_orders_nothing() -> None:
    s = SharedLayers()
    assert s == parse_shared("frozen") == parse_shared("  FROZEN ")
    assert (s.mode, s.delay, s.predict, s.t1, str(s)) == ("frozen", 0, False, 0, "frozen")
    assert not s.trains_shared and s.gate is None
    assert [s.version_read(j) for j in (0, 1, 7)] == [0, 0, 0]


def test_serial_is_the_exact_rule() -> None:
    s = parse_shared("serial")
    assert s == SharedLayers("serial", 0) and str(s) == "serial"
    assert s.trains_shared and s.gate == 0
    assert [s.version_read(j) for j in (0, 1, 7)] == [0, 1, 7]  # subnet j sees every earlier update


@pytest.mark.parametrize("d", [0, 1, 3, MAX_DELAY])
def test_delayed_reads_the_version_of_j_minus_d(d: int) -> None:
    s = parse_shared(f"delayed:{d}")
    assert (s.mode, s.delay, str(s)) == ("delayed", d, f"delayed:{d}")
    assert s.trains_shared and s.gate == d
    assert [s.version_read(j) for j in (0, d, d + 1, d + 5)] == [0, 0, 1, 5]


def test_corrections_parse_and_print_back() -> None:
    s = parse_shared("delayed:4+predict+t1=200")
    assert (s.mode, s.delay, s.predict, s.t1) == ("delayed", 4, True, 200)
    assert str(s) == "delayed:4+predict+t1=200"
    assert parse_shared(" Delayed:2 + T1=5 ") == SharedLayers("delayed", 2, False, 5)
    assert str(parse_shared("delayed:2+predict")) == "delayed:2+predict"
    assert parse_shared(s) is s  # a parsed policy passes through


@pytest.mark.parametrize(("text", "message"), [
    ("serial+predict", "apply to delayed:D only"),
    ("frozen+t1=3", "apply to delayed:D only"),
    ("delayed:2+t1=0", "bad shared-layer correction 't1=0'"),
    ("delayed:2+t1=x", "bad shared-layer correction 't1=x'"),
    ("delayed:2+t1", "bad shared-layer correction 't1'"),
    ("delayed:2+t2=5", "bad shared-layer correction 't2=5'"),
    ("delayed:2+predicted", "bad shared-layer correction 'predicted'"),
    ("delayed", "use delayed:D with a whole number D >= 0"),
    ("delayed:-1", "use delayed:D"),
    ("delayed:x", "use delayed:D"),
    (f"delayed:{MAX_DELAY + 1}", f"the delay D must lie in 0..{MAX_DELAY}"),
    ("bogus", "unknown shared-layer policy 'bogus'"),
])
def test_bad_policies_are_refused_with_one_line(text: str, message: str) -> None:
    with pytest.raises(SharedPolicyError, match=message) as e:
        parse_shared(text)
    assert "\n" not in str(e.value)


@given(st.sampled_from(["frozen", "serial", "delayed"]), st.integers(0, 50), st.booleans(), st.integers(0, 999))
def test_every_policy_prints_as_it_parses(mode: str, delay: int, predict: bool, t1: int) -> None:
    if mode != "delayed":
        s = SharedLayers(mode, 0)
    else:
        s = SharedLayers("delayed", delay, predict, t1)
    assert parse_shared(str(s)) == s
