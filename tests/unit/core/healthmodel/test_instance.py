"""One instance's rules over time: breaker, probes, gradual restore, ejection, the slow rule, restore from a record."""

from __future__ import annotations

from reach.core.breaker import Outcome
from reach.core.healthmodel.instance import InstanceTracker
from reach.core.healthmodel.settings import HealthSettings
from reach.records import BreakerState
from tests.unit.core.healthmodel.support import SHORT, call

FAIL, OK = Outcome.FAILURE, Outcome.SUCCESS


def tracker(settings: HealthSettings = SHORT) -> InstanceTracker:
    return InstanceTracker("i-1", "agent://demo/x", settings)


def feed(t: InstanceTracker, start: int, outcomes: list[Outcome], step: int = 100, run_ms: int = 10,
         threshold: float | None = None) -> int:
    at = start
    for outcome in outcomes:
        t.observe(call(at, outcome, run_ms=run_ms), slow_threshold_ms=threshold)
        t.tick(at)
        at += step
    return at


def test_sick_instance_opens_probes_closes_and_is_restored_gradually() -> None:
    t = tracker()
    feed(t, 1_000, [FAIL] * 10)
    assert t.breaker.state is BreakerState.OPEN and t.admit == 0.0
    assert t.consecutive_failures == 10
    until = t.breaker.open_until or 0
    t.tick(until - 1)
    assert t.breaker.state is BreakerState.OPEN
    t.tick(until)
    assert (t.breaker.state, t.admit) == (BreakerState.HALF_OPEN, 0.1)
    feed(t, until + 10, [OK] * 3)
    closed_at = until + 210
    assert t.breaker.state is BreakerState.CLOSED
    assert (t.admit, t.restore_step, t.weight) == (0.1, 0, 1.0)
    t.tick(closed_at + SHORT.restore_step_ms - 1)
    assert t.admit == 0.1
    t.tick(closed_at + SHORT.restore_step_ms)
    assert t.admit == 0.5
    t.tick(closed_at + 2 * SHORT.restore_step_ms)
    assert (t.admit, t.restore_step, t.reason) == (1.0, None, "restored")
    assert t.consecutive_failures == 0


def test_a_failing_probe_reopens_and_keeps_it_out() -> None:
    t = tracker()
    feed(t, 1_000, [FAIL] * 10)
    until = t.breaker.open_until or 0
    t.tick(until)
    feed(t, until + 10, [OK, FAIL])
    assert t.breaker.state is BreakerState.OPEN and t.breaker.open_until == until + 110 + SHORT.open_ms
    assert t.restore_step is None


def test_low_one_minute_success_ejects_then_restores_gradually() -> None:
    lenient = HealthSettings(**{**SHORT.model_dump(), "min_calls": 1_000})  # the error-rate breaker stays out of it
    t = tracker(lenient)
    end = feed(t, 1_000, [OK, FAIL] * 6, step=100)  # 50% < 60% over 12 calls
    assert t.weight == 0.0 and t.ejected_until is not None
    assert t.breaker.state is BreakerState.CLOSED and t.admit == 1.0  # eligible, picked only when alone
    assert "ejected" in (t.reason or "")
    hold_over = t.ejected_until
    t.tick(hold_over - 1)
    assert t.weight == 0.0
    t.tick(hold_over)
    assert (t.weight, t.admit, t.restore_step) == (1.0, 0.1, 0)
    assert end <= hold_over
    # the failures before the ejection no longer count: a healthy restore climbs the ladder
    feed(t, hold_over + 1_000, [OK] * 3, step=1_000)
    t.tick(hold_over + lenient.restore_step_ms)
    assert t.admit == 0.5
    t.tick(hold_over + 2 * lenient.restore_step_ms)
    assert (t.admit, t.weight) == (1.0, 1.0)


def test_an_unhealthy_restore_step_ejects_again() -> None:
    lenient = HealthSettings(**{**SHORT.model_dump(), "min_calls": 1_000})
    t = tracker(lenient)
    feed(t, 1_000, [OK, FAIL] * 6, step=100)
    hold_over = t.ejected_until or 0
    t.tick(hold_over)
    assert t.admit == 0.1
    feed(t, hold_over + 1_000, [FAIL, OK] * 6, step=100)
    assert t.weight == 0.0 and t.restore_step is None and t.ejected_until is not None


def test_slow_windows_set_weight_zero_and_a_longer_timeout_for_a_while() -> None:
    t = tracker()
    at = 10_000
    for _ in range(SHORT.slow_windows):
        at = feed(t, at, [OK] * 4, step=250, run_ms=500, threshold=100.0)  # every call slower than 100 ms
    t.tick(at)
    assert (t.weight, t.timeout_factor) == (0.0, 2.0)
    assert t.breaker.state is BreakerState.CLOSED and t.admit == 1.0
    assert "slow" in (t.reason or "")
    until = t.slow_until or 0
    t.tick(until)
    assert (t.weight, t.timeout_factor) == (1.0, 1.0)


def test_four_slow_windows_and_one_fast_are_not_slow() -> None:
    t = tracker()
    at = 10_000
    for i in range(SHORT.slow_windows):
        at = feed(t, at, [OK] * 4, step=250, run_ms=20 if i == 2 else 500, threshold=100.0)
    t.tick(at)
    assert t.weight == 1.0 and t.slow_until is None


def test_overloads_open_the_breaker() -> None:
    t = tracker()
    feed(t, 1_000, [OK, Outcome.OVERLOAD, OK, Outcome.OVERLOAD, Outcome.OVERLOAD])
    assert t.breaker.state is BreakerState.OPEN
    assert t.record(2_000).overloads_10s == 3  # the stats say what happened; the breaker judged it already


def test_restored_from_its_record_it_continues_and_replayed_calls_do_not_decide_again() -> None:
    t = tracker()
    feed(t, 1_000, [FAIL] * 10)
    until = t.breaker.open_until or 0
    t.tick(until)
    feed(t, until + 10, [OK] * 2)
    published = t.record(until + 500)
    again = InstanceTracker.restore(published, SHORT)
    assert again.decision() == t.decision()
    assert (again.breaker.state, again.breaker.probe_successes) == (BreakerState.HALF_OPEN, 2)
    again.observe(call(until + 20, FAIL), slow_threshold_ms=None)  # a replayed call: fills windows only
    assert again.breaker.state is BreakerState.HALF_OPEN
    again.observe(call(until + 600, OK), slow_threshold_ms=None)  # a new one: the third probe closes it
    assert again.breaker.state is BreakerState.CLOSED and again.admit == 0.1


def test_record_numbers() -> None:
    t = tracker()
    feed(t, 1_000, [OK] * 8 + [FAIL], step=10, run_ms=100)
    rec = t.record(1_100)
    assert (rec.calls_1m, rec.success_1m, rec.calls_5m) == (9, round(8 / 9, 4), 9)
    assert (rec.p50_ms, rec.p95_ms, rec.consecutive_failures) == (100.0, 100.0, 1)
    assert rec.breaker is BreakerState.CLOSED and rec.open_until is None
