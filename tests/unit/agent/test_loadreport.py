"""The SDK's load reporter: when it publishes, what it says, and the queue bound it computes."""

from __future__ import annotations

from typing import Any

import pytest

from reach.agent import Agent
from reach.agent.exceptions import InvalidDeclaration
from reach.agent.loadreport import DrainMeter, LoadReporter
from reach.core.loads import default_max_queue
from reach.envelopes import DELIVERY_TIMEOUT_MS
from reach.kafka import codec
from reach.records import LoadReport, Policy


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Sent:
    """A publisher fake: keeps what was sent, decoded."""

    def __init__(self, fail: bool = False) -> None:
        self.reports: list[LoadReport] = []
        self.fail = fail

    def __call__(self, topic: str, key: str, value: bytes) -> Any:
        if self.fail:
            raise BufferError("queue full")
        report = codec.decode(value, LoadReport)
        assert topic == "ns.loads" and key == report.instance_id
        self.reports.append(report)
        return None


def agent(**kw: Any) -> Agent:
    a = Agent("agent://test/load", instance_id="i-1", **kw)

    @a.capability("test.load", version="1.0.0")
    def handle(payload: Any) -> Any:
        return payload

    return a


def reporter(a: Agent, sent: Sent, clock: Clock, **kw: Any) -> LoadReporter:
    return LoadReporter(a, publish=sent, topic="ns.loads", clock=clock, **kw)


def test_reports_once_a_second_and_on_changes_over_ten_percent_rate_limited() -> None:
    clock, sent = Clock(), Sent()
    r = reporter(agent(max_concurrency=20), sent, clock)
    assert r.tick(inflight=0, queued=0) is not None, "the first tick reports"
    clock.now += 500
    assert r.tick(inflight=2, queued=0) is None, "2 of 20 is not more than 10%"
    clock.now += 499
    assert r.tick(inflight=2, queued=0) is None
    clock.now += 1
    assert r.tick(inflight=2, queued=0) is not None, "a second since the last report"
    clock.now += 50
    assert r.tick(inflight=10, queued=0) is None, "a big change, but 50 ms after the last report"
    clock.now += 50
    assert r.tick(inflight=10, queued=0) is not None
    clock.now += 100
    assert r.tick(inflight=10, queued=5) is not None, "the backlog moved by 5 of 20"
    assert [(x.inflight, x.queued) for x in sent.reports] == [(0, 0), (2, 0), (10, 0), (10, 5)]
    assert {(x.capacity, x.instance_id, x.agent_id) for x in sent.reports} == {(20, "i-1", "agent://test/load")}


def test_a_change_above_ten_percent_reports_once_the_gap_passed() -> None:
    clock, sent = Clock(), Sent()
    r = reporter(agent(max_concurrency=8), sent, clock)
    r.tick(inflight=0, queued=0)
    clock.now += 100
    assert r.tick(inflight=1, queued=0) is not None, "1 of 8 is more than 10%"
    clock.now += 100
    assert r.tick(inflight=1, queued=0) is None, "no change"


def test_an_idle_instance_repeats_its_report_every_five_seconds_and_a_message_reports_at_once() -> None:
    clock, sent = Clock(), Sent()
    r = reporter(agent(max_concurrency=4), sent, clock)
    r.tick(inflight=0, queued=0)
    for _ in range(4):
        clock.now += 1_000
        assert r.tick(inflight=0, queued=0) is None, "nothing runs, nothing is queued: the last report holds"
    clock.now += 1_000
    assert r.tick(inflight=0, queued=0) is not None, "five seconds on: repeated"
    clock.now += 200
    assert r.tick(inflight=1, queued=0) is not None, "a message arrived: reported at once"
    clock.now += 1_000
    assert r.tick(inflight=0, queued=0) is not None, "and its end"
    clock.now += 1_000
    assert r.tick(inflight=0, queued=0) is None
    assert [(x.inflight, x.queued) for x in sent.reports] == [(0, 0), (0, 0), (1, 0), (0, 0)]


def run_busy(meter: DrainMeter, clock: Clock, *, running: int, service_ms: int, for_ms: int) -> None:
    """`running` handlers busy all along, each finishing after `service_ms` and replaced at once."""
    meter.observe(running)
    for step in range(1, for_ms // 10 + 1):
        clock.now += 10
        if step * 10 % service_ms == 0:
            for _ in range(running):
                meter.completed()
        meter.observe(running)


def test_drain_rate_is_what_a_full_instance_completes() -> None:
    clock = Clock()
    full = DrainMeter(capacity=4, clock=clock)
    full.observe(0)
    assert full.rate() is None, "not measured before a window with work"
    run_busy(full, clock, running=4, service_ms=1_000, for_ms=3_000)
    assert full.rate() == pytest.approx(4.0), "4 handlers x 1 s each: 4/s"
    light = DrainMeter(capacity=4, clock=clock)
    run_busy(light, clock, running=1, service_ms=500, for_ms=3_000)
    assert light.rate() == pytest.approx(8.0), "1 of 4 busy at 2/s: a full instance would do 8/s"
    run_busy(light, clock, running=0, service_ms=500, for_ms=3_000)
    assert light.rate() == pytest.approx(8.0), "an idle window keeps the estimate"
    slow = DrainMeter(capacity=4, clock=clock)
    run_busy(slow, clock, running=4, service_ms=10_000, for_ms=9_000)
    assert slow.rate() is None, "busy for 9 s and nothing finished yet: not known"
    run_busy(slow, clock, running=4, service_ms=1_000, for_ms=1_000)
    assert slow.rate() == pytest.approx(4 * 4 / 40), "4 done in 4 x 10 s of handler time"
    stuck = DrainMeter(capacity=4, clock=clock)
    run_busy(stuck, clock, running=4, service_ms=60_000, for_ms=30_000)
    assert stuck.rate() == 0.0, "busy for 10 windows and nothing finished: nothing drains"


def test_the_default_queue_bound_follows_the_drain_rate() -> None:
    clock, sent = Clock(), Sent()
    r = reporter(agent(max_concurrency=4), sent, clock)
    assert r.tick(inflight=0, queued=0).max_queue == 16  # type: ignore[union-attr]
    run_busy(r.meter, clock, running=4, service_ms=1_500, for_ms=3_000)  # 4 x 1.5 s: 2.67/s
    report = r.tick(inflight=4, queued=0)
    assert report is not None and report.drain_rate == pytest.approx(8 / 3)
    assert report.max_queue == int(DELIVERY_TIMEOUT_MS / 1000 * 8 / 3) == 13, "5 s x 2.67/s < 4 x 4"


def test_the_policy_delivery_timeout_bounds_the_queue() -> None:
    clock, sent = Clock(), Sent()
    policy = Policy(delivery_timeout_ms=1_000)
    r = reporter(agent(max_concurrency=4), sent, clock, policy=lambda _cap: policy)
    run_busy(r.meter, clock, running=4, service_ms=500, for_ms=3_000)  # 4 x 0.5 s: 8/s
    report = r.tick(inflight=4, queued=0)
    assert report is not None and report.max_queue == 8, "1 s x 8/s"


def test_an_explicit_max_queue_is_kept() -> None:
    a = agent(max_concurrency=4, max_queue=3)
    assert a.queue_bound(100.0, DELIVERY_TIMEOUT_MS) == 3 and a.queue_bound(None, 1) == 3
    reg = a.registration(state="READY", heartbeat_at=0, inbox_topic="x", inflight=0,  # type: ignore[arg-type]
                         assigned_partitions=[0])
    assert reg.max_queue == 3
    assert agent(max_concurrency=8).registration(state="READY", heartbeat_at=0, inbox_topic="x",  # type: ignore[arg-type]
                                                 inflight=0, assigned_partitions=[0]).max_queue == 32
    with pytest.raises(InvalidDeclaration, match="max_queue"):
        agent(max_queue=-1)


def test_default_max_queue() -> None:
    assert default_max_queue(8, None, 5_000) == 32
    assert default_max_queue(8, 1_000.0, 5_000) == 32
    assert default_max_queue(8, 3.0, 5_000) == 15
    assert default_max_queue(8, 0.0, 5_000) == 0


def test_a_failed_send_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    clock, sent = Clock(), Sent(fail=True)
    r = reporter(agent(), sent, clock)
    assert r.tick(inflight=0, queued=0) is not None
    clock.now += 1_000
    r.tick(inflight=0, queued=0)
    assert sum("load report" in m for m in caplog.messages) == 1, "warned once"
