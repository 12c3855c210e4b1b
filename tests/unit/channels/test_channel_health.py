"""Channel health (pure): the three signals graded against issue 15's thresholds, worst wins; 429s and a graded
OPEN open the breaker for 30 s; probes bring it back."""

from __future__ import annotations

import pytest

from reach.channels.health import ChannelHealth, ChannelRules, ChannelState, grade

H, D, OP = ChannelState.HEALTHY, ChannelState.DEGRADED, ChannelState.OPEN


@pytest.mark.parametrize(("success", "p95", "arrival", "want"), [
    (1.0, 100, 1.0, H), (0.98, 800, 0.90, H),
    (0.979, 100, 1.0, D), (0.80, 100, 1.0, D), (0.799, 100, 1.0, OP),
    (1.0, 801, 1.0, D), (1.0, 2_000, 1.0, D), (1.0, 2_001, 1.0, OP),
    (1.0, 100, 0.899, D), (1.0, 100, 0.70, D), (1.0, 100, 0.699, OP),
    (0.9, 1_500, 0.5, OP),  # worst of three
    (None, None, None, H), (0.5, None, None, OP),  # an ungraded signal does not count
])
def test_grades_follow_the_thresholds_and_the_worst_wins(success: float | None, p95: float | None,
                                                         arrival: float | None, want: ChannelState) -> None:
    assert grade(success=success, p95_ms=p95, arrival=arrival) is want


def sends(health: ChannelHealth, at: int, n: int, **kw: object) -> None:
    for i in range(n):
        health.send(at + i, **{"ok": True, "latency_ms": 50, **kw})  # type: ignore[arg-type]


def test_three_429s_within_10s_open_it_at_once_for_30s_then_3_probes_close_it() -> None:
    health = ChannelHealth()
    sends(health, 0, 20)
    assert health.state(1_000) is H
    for at in (2_000, 5_000, 9_000):
        health.send(at, ok=False, latency_ms=20, rate_limited=True)
    assert health.state(9_001) is OP
    assert not health.probe_due(38_000) and health.state(38_000) is OP  # OPEN lasts 30 s
    assert health.probe_due(39_001)
    health.probe(39_001, ok=True)
    assert not health.probe_due(40_000)  # one probe every 30 s
    assert health.probe_due(69_001)
    health.probe(69_001, ok=True)
    health.probe(99_001, ok=True)
    assert health.state(99_002) is H


def test_429s_spread_over_more_than_10s_do_not_open_it() -> None:
    health = ChannelHealth()
    for at in (0, 6_000, 12_000, 18_000):
        health.send(at, ok=False, latency_ms=20, rate_limited=True)
    sends(health, 20_000, 200)
    assert health.state(21_000) is H


def test_a_failed_probe_reopens_it() -> None:
    health = ChannelHealth()
    for at in (0, 1, 2):
        health.send(at, ok=False, latency_ms=1, rate_limited=True)
    assert health.probe_due(30_002)
    health.probe(30_002, ok=False)
    assert health.state(30_003) is OP and not health.probe_due(59_000)


def test_a_low_success_rate_trips_the_breaker() -> None:
    health = ChannelHealth()
    sends(health, 0, 7)
    sends(health, 100, 3, ok=False)  # 70% success
    assert health.state(1_000) is OP
    assert health.breaker.reason is not None and "success 70%" in health.breaker.reason


def test_slow_sends_degrade_it() -> None:
    health = ChannelHealth()
    sends(health, 0, 20, latency_ms=1_500)
    assert health.state(1_000) is D


def test_missing_delivery_reports_degrade_then_open_it() -> None:
    rules = ChannelRules(report_grace_ms=1_000)
    health = ChannelHealth(rules)
    for i in range(10):
        health.send(i, ok=True, latency_ms=10, provider_message_id=f"p{i}", expects_report=True)
    for i in range(8):
        health.report(f"p{i}")
    assert health.state(500) is H  # reports not due yet
    assert health.state(2_000) is D  # 80% arrived
    health2 = ChannelHealth(rules)
    for i in range(10):
        health2.send(i, ok=True, latency_ms=10, provider_message_id=f"p{i}", expects_report=True)
    health2.report("p0")
    assert health2.state(2_000) is OP


def test_too_few_sends_are_not_graded_and_old_ones_leave_the_window() -> None:
    health = ChannelHealth()
    sends(health, 0, 5, ok=False)
    assert health.state(100) is H  # 5 sends: no verdict
    sends(health, 0, 20, ok=False)
    assert health.state(61_000) is H  # all older than the 1-minute window
    assert health.signals(61_000) == (None, None, None)


def test_trip_opens_a_closed_breaker_once() -> None:
    health = ChannelHealth()
    assert health.breaker.trip(5, "judged") and health.breaker.open_until == 5 + 30_000
    assert not health.breaker.trip(6, "again") and health.breaker.reason == "judged"


IDLE = ChannelRules(idle_probe_every_ms=30_000, idle_probe_failures=2, open_ms=30_000, probe_every_ms=30_000,
                    probes=3)


def test_an_idle_probe_is_due_only_after_30s_without_a_send_or_probe() -> None:
    health = ChannelHealth(IDLE)
    assert health.idle_probe_due(0)  # never used: due at once
    health.send(1_000, ok=True, latency_ms=5)
    assert not health.idle_probe_due(30_999)
    assert health.idle_probe_due(31_000)
    health.idle_probe(31_000, ok=True)
    assert not health.idle_probe_due(60_999) and health.idle_probe_due(61_000)


def test_two_failed_idle_probes_in_a_row_open_it_and_a_pass_between_resets_the_count() -> None:
    health = ChannelHealth(IDLE)
    health.idle_probe(0, ok=False, reason="refused")
    health.idle_probe(30_000, ok=True)
    health.idle_probe(60_000, ok=False, reason="refused")
    assert health.state(60_000) is ChannelState.HEALTHY
    health.idle_probe(90_000, ok=False, reason="refused")
    assert health.state(90_000) is ChannelState.OPEN
    assert "2 idle probes failed: refused" in (health.breaker.reason or "")
    assert health.signals(90_000) == (None, None, None)  # probes are not sends: the graded signals never saw them


def test_while_open_idle_probes_wait_then_close_it_after_three_passes() -> None:
    health = ChannelHealth(IDLE)
    for at in (0, 30_000):
        health.idle_probe(at, ok=False, reason="down")
    assert health.state(30_000) is ChannelState.OPEN
    assert not health.idle_probe_due(59_999)  # OPEN for open_ms: no probe
    for at in (60_000, 90_000, 120_000):
        assert health.idle_probe_due(at)
        health.idle_probe(at, ok=True)
    assert health.state(120_000) is ChannelState.HEALTHY
