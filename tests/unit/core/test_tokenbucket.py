"""The token bucket's rule: full at start, refills at `rate`, never holds more than `burst`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach.core.tokenbucket import TokenBucket


def test_starts_full_then_refuses_with_the_wait() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.1)
    assert bucket.take(0.1) == 0.0


def test_refill_is_capped_at_burst() -> None:
    bucket = TokenBucket(rate=100, burst=2)
    bucket.take(0.0)
    bucket.take(0.0)
    assert bucket.peek(3600.0, 2) == 0.0
    assert bucket.peek(3600.0, 3) > 0.0


def test_a_clock_going_backwards_adds_nothing() -> None:
    bucket = TokenBucket(rate=1, burst=1)
    assert bucket.take(10.0) == 0.0
    assert bucket.take(5.0) > 0.0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 5), (1, 0)])
def test_bad_parameters_are_refused(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="rate > 0 and burst >= 1"):
        TokenBucket(rate=rate, burst=burst)


@given(st.floats(0.5, 1000), st.integers(1, 50), st.lists(st.floats(0, 0.05), min_size=1, max_size=200))
def test_never_admits_more_than_burst_plus_rate_times_elapsed(rate: float, burst: int, gaps: list[float]) -> None:
    bucket, now, admitted = TokenBucket(rate=rate, burst=burst), 0.0, 0
    for gap in gaps:
        now += gap
        admitted += bucket.take(now) == 0.0
    assert admitted <= burst + rate * now + 1e-6
