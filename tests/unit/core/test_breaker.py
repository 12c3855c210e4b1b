"""The generic circuit breaker: CLOSED -> OPEN -> HALF_OPEN -> CLOSED, with explicit times and rules per use."""

from __future__ import annotations

from reach.core.breaker import BreakerRules, CircuitBreaker, Outcome
from reach.records import BreakerState

RULES = BreakerRules(error_rate=0.2, min_calls=10, window_ms=10_000, overloads=3, open_ms=30_000, probe_admit=0.1,
                     probes=3)


def fed(outcomes: list[Outcome], *, start: int = 0, step: int = 100, rules: BreakerRules = RULES) -> CircuitBreaker:
    breaker = CircuitBreaker(rules)
    for i, outcome in enumerate(outcomes):
        breaker.record(outcome, start + i * step)
    return breaker


def test_opens_above_the_error_rate_over_enough_calls() -> None:
    breaker = fed([Outcome.SUCCESS] * 7 + [Outcome.FAILURE] * 2)
    assert breaker.state is BreakerState.CLOSED  # 2 of 9: too few calls to judge
    assert breaker.record(Outcome.FAILURE, 950) is True  # 3 of 10 = 30% > 20%
    assert breaker.state is BreakerState.OPEN
    assert breaker.open_until == 950 + 30_000
    assert breaker.admit == 0.0
    assert "3 of 10" in (breaker.reason or "")


def test_exactly_the_threshold_does_not_open() -> None:
    breaker = fed([Outcome.SUCCESS] * 8 + [Outcome.FAILURE] * 2)  # 20%, not above it
    assert breaker.state is BreakerState.CLOSED


def test_failures_outside_the_window_do_not_count() -> None:
    breaker = fed([Outcome.FAILURE] * 5, step=100)
    for i in range(10):
        breaker.record(Outcome.SUCCESS, 20_000 + i)
    assert breaker.window(20_010) == (10, 0, 0)
    assert breaker.state is BreakerState.CLOSED


def test_three_overloads_within_the_window_open_it_regardless_of_calls() -> None:
    breaker = fed([Outcome.OVERLOAD, Outcome.SUCCESS, Outcome.OVERLOAD])
    assert breaker.state is BreakerState.CLOSED
    breaker.record(Outcome.OVERLOAD, 9_000)
    assert breaker.state is BreakerState.OPEN
    assert "3 overload" in (breaker.reason or "")


def test_overloads_spread_over_more_than_the_window_do_not_open() -> None:
    breaker = fed([Outcome.OVERLOAD] * 3, step=6_000)
    assert breaker.state is BreakerState.CLOSED


def test_half_open_at_open_until_then_probes_close_it() -> None:
    breaker = fed([Outcome.FAILURE] * 10)
    until = breaker.open_until
    assert until is not None
    assert breaker.tick(until - 1) is False
    assert breaker.tick(until) is True
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.admit == 0.1
    breaker.record(Outcome.SUCCESS, until + 1)
    breaker.record(Outcome.SUCCESS, until + 2)
    assert breaker.state is BreakerState.HALF_OPEN and breaker.probe_successes == 2
    assert breaker.record(Outcome.SUCCESS, until + 3) is True
    assert breaker.state is BreakerState.CLOSED and breaker.admit == 1.0
    assert breaker.window(until + 3) == (0, 0, 0)  # a closed breaker starts with an empty window


def test_a_failed_probe_reopens_it_for_another_open_period() -> None:
    breaker = fed([Outcome.FAILURE] * 10)
    until = breaker.open_until or 0
    breaker.tick(until)
    breaker.record(Outcome.SUCCESS, until + 1)
    assert breaker.record(Outcome.FAILURE, until + 2) is True
    assert breaker.state is BreakerState.OPEN
    assert breaker.open_until == until + 2 + RULES.open_ms
    assert breaker.probe_successes == 0


def test_calls_from_before_a_transition_are_not_evidence() -> None:
    breaker = fed([Outcome.FAILURE] * 10)
    until = breaker.open_until or 0
    assert breaker.record(Outcome.FAILURE, 5_000) is False  # still finishing while OPEN
    breaker.tick(until)
    assert breaker.record(Outcome.FAILURE, until - 1) is False  # finished before HALF_OPEN began
    assert breaker.state is BreakerState.HALF_OPEN


def test_rules_are_per_use() -> None:
    strict = BreakerRules(error_rate=0.5, min_calls=2, window_ms=1_000, overloads=1, open_ms=50, probes=1)
    breaker = fed([Outcome.SUCCESS, Outcome.FAILURE], rules=strict)
    assert breaker.state is BreakerState.CLOSED  # 50% is not above 50%
    breaker.record(Outcome.FAILURE, 300)
    assert breaker.state is BreakerState.OPEN and breaker.open_until == 350
    breaker.tick(350)
    breaker.record(Outcome.SUCCESS, 351)
    assert breaker.state is BreakerState.CLOSED


def test_restored_state_is_kept_and_unknown_reads_as_closed() -> None:
    restored = CircuitBreaker(RULES, state=BreakerState.HALF_OPEN, since=100, probe_successes=2)
    restored.record(Outcome.SUCCESS, 200)
    assert restored.state is BreakerState.CLOSED
    assert CircuitBreaker(RULES, state=BreakerState.UNKNOWN).state is BreakerState.CLOSED
