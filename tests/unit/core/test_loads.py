"""The load model: occupancy from reports and STARTED receipts, queue from routing, each message counted once."""

from __future__ import annotations

from reach.core.loads import (
    MAX_RETRY_AFTER_MS,
    MIN_RETRY_AFTER_MS,
    UNMEASURED_RETRY_AFTER_MS,
    InstanceLoad,
    LoadTracker,
    retry_after_ms,
)
from reach.records import AgentRegistration, LoadReport
from tests.unit.routing_fixtures import reg

A = reg("a", max_concurrency=8, max_queue=32)


def report(at: int, inflight: int, queued: int = 0, *, max_queue: int = 32, drain: float | None = 40.0,
           instance: str = "a") -> LoadReport:
    return LoadReport(instance_id=instance, agent_id="agent://echo/main", at=at, inflight=inflight, queued=queued,
                      capacity=8, max_queue=max_queue, drain_rate=drain)


def load(tracker: LoadTracker, registration: AgentRegistration = A) -> InstanceLoad:
    return tracker.load(registration)


def key(n: int) -> tuple[str, int, int]:
    return (f"m{n}", 0, 1)


def test_queue_time_is_not_occupancy() -> None:
    """The old model's failure: 30 requests routed to an idle instance, their receipts read late."""
    tracker = LoadTracker()
    tracker.report(report(0, 0))
    for n in range(30):
        tracker.routed(key(n), "a", 10 + n)
    assert load(tracker) == InstanceLoad(0, 30, 8, 32, 40.0), "routed, not started: queue, not occupancy"
    for n in range(30):
        tracker.started(key(n), "a", 100 + n)
        tracker.finished(key(n), 101 + n)
    assert load(tracker) == InstanceLoad(0, 0, 8, 32, 40.0)
    assert not load(tracker).full


def test_a_report_absorbs_what_started_before_it() -> None:
    tracker = LoadTracker()
    tracker.routed(key(1), "a", 50)
    tracker.started(key(1), "a", 100)
    assert load(tracker).occupancy == 1 and load(tracker).queue == 0
    tracker.report(report(200, 1))
    assert load(tracker).occupancy == 1, "the report counts it; the STARTED receipt does not count it again"
    tracker.finished(key(1), 300)
    assert load(tracker).occupancy == 0


def test_a_started_receipt_read_after_the_report_but_older_is_not_counted_twice() -> None:
    tracker = LoadTracker()
    tracker.report(report(200, 1))
    tracker.started(key(1), "a", 150)
    assert load(tracker).occupancy == 1
    tracker.started(key(2), "a", 250)
    assert load(tracker).occupancy == 2, "started after the report: counted from its receipt"
    tracker.finished(key(1), 260)
    tracker.finished(key(2), 270)
    assert load(tracker).occupancy == 0


def test_finishes_before_the_report_need_no_correction() -> None:
    tracker = LoadTracker()
    tracker.started(key(1), "a", 100)
    tracker.report(report(200, 0))
    tracker.finished(key(1), 150)  # read late; the report already knew it had finished
    assert load(tracker).occupancy == 0
    tracker.report(report(300, 2))
    tracker.finished(key(9), 310)  # a message this worker never saw start: nothing to subtract from
    assert load(tracker).occupancy == 2


def test_a_report_read_after_newer_receipts_does_not_count_what_finished_since() -> None:
    tracker = LoadTracker()
    tracker.report(report(100, 0))
    tracker.started(key(1), "a", 150)
    tracker.started(key(2), "a", 160)
    tracker.finished(key(1), 250)  # receipts read before the report of 200 (another partition, read first)
    tracker.started(key(3), "a", 260)
    tracker.report(report(200, 2))  # counted 1 and 2 running
    assert load(tracker).occupancy == 2, "2 (counted by the report) and 3 (started after it)"
    tracker.finished(key(2), 270)
    tracker.finished(key(3), 280)
    assert load(tracker).occupancy == 0


def test_occupancy_never_exceeds_max_concurrency() -> None:
    tracker = LoadTracker()
    tracker.report(report(100, 8))
    for n in range(3):
        tracker.started(key(n), "a", 200 + n)  # their finishes not read yet, nor the report that absorbs them
    assert load(tracker).occupancy == 8


def test_a_receipt_that_overtook_the_routing_is_not_counted() -> None:
    tracker = LoadTracker()
    tracker.started(key(1), "a", 100)
    tracker.routed(key(1), "a", 90)
    assert load(tracker) == InstanceLoad(1, 0, 8, 32)
    tracker.finished(key(2), 100)
    tracker.routed(key(2), "a", 90)
    assert load(tracker).queue == 0


def test_the_queue_is_at_least_the_reported_backlog() -> None:
    tracker = LoadTracker()  # a router that started after these were routed
    tracker.report(report(100, 8, queued=5))
    assert load(tracker).queue == 5
    for n in range(7):
        tracker.routed(key(n), "a", 120)
    assert load(tracker).queue == 7, "its own count when larger: the rest of the queue is in the inbox"


def test_heartbeats_are_the_base_until_a_newer_report() -> None:
    tracker = LoadTracker()
    heartbeat = reg("a", inflight=3, max_concurrency=8, max_queue=32).model_copy(update={"heartbeat_at": 100})
    tracker.heartbeat(heartbeat)
    assert load(tracker) == InstanceLoad(3, 0, 8, 32, None)
    tracker.report(report(200, 1, max_queue=20, drain=10.0))
    assert load(tracker) == InstanceLoad(1, 0, 8, 20, 10.0), "the report's bound and drain rate apply"
    tracker.heartbeat(heartbeat)  # older than the report
    assert load(tracker).occupancy == 1
    tracker.report(report(150, 6))  # an older report arriving late
    assert load(tracker).occupancy == 1


def test_a_redelivery_moves_the_message_to_the_instance_that_started_it() -> None:
    b = reg("b", max_concurrency=8, max_queue=32)
    tracker = LoadTracker()
    tracker.routed(key(1), "a", 10)
    tracker.started(key(1), "b", 20)
    assert tracker.view([A, b]) == {"a": InstanceLoad(0, 0, 8, 32), "b": InstanceLoad(1, 0, 8, 32)}


def test_a_tombstone_forgets_the_instance() -> None:
    tracker = LoadTracker()
    tracker.routed(key(1), "a", 10)
    tracker.forget("a")
    assert load(tracker) == InstanceLoad(0, 0, 8, 32)
    tracker.finished(key(1), 20)  # its late receipt is harmless
    assert load(tracker) == InstanceLoad(0, 0, 8, 32)


def test_messages_whose_receipts_never_came_are_forgotten() -> None:
    tracker = LoadTracker(stale_after_ms=1_000)
    tracker.routed(key(1), "a", 0)
    tracker.started(key(2), "a", 0)
    tracker.report(report(5_000, 0))
    assert load(tracker) == InstanceLoad(0, 0, 8, 32, 40.0)


def test_an_instance_killed_without_a_tombstone_is_forgotten() -> None:
    tracker = LoadTracker(forget_after_ms=60_000)
    alive, killed = A.model_copy(update={"instance_id": "alive"}), A  # ttl 10 s: 2 x TTL is below the bound
    tracker.heartbeat(killed)
    for n in range(5):
        tracker.routed(key(n), "a", 1_000)  # queued for it when it was SIGKILLed
    assert load(tracker).queue == 5
    for beat in range(0, 70_000, 10_000):  # its neighbour keeps beating; the view runs every batch
        tracker.heartbeat(alive.model_copy(update={"heartbeat_at": beat}))
        tracker.view([alive], now_ms=beat)
    assert tracker.tracked() == 2, "not yet: 61 s is the first prune past the bound"
    tracker.view([alive], now_ms=71_000)
    assert tracker.tracked() == 1 and tracker.load(alive) == InstanceLoad(0, 0, 8, 32)
    assert load(tracker) == InstanceLoad.of(killed), "a registration read again starts from its heartbeat alone"


def test_a_long_ttl_keeps_a_silent_instance_for_twice_its_ttl() -> None:
    tracker = LoadTracker(forget_after_ms=1_000)
    tracker.heartbeat(A.model_copy(update={"ttl_ms": 50_000}))
    tracker.view([], now_ms=99_000)
    assert tracker.tracked() == 1, "99 s of silence is within 2 x 50 s"
    tracker.view([], now_ms=109_000)  # the next prune (one per PRUNE_EVERY_MS)
    assert tracker.tracked() == 0


def test_the_newer_of_report_and_heartbeat_gives_the_capacity() -> None:
    tracker = LoadTracker()
    tracker.report(LoadReport(instance_id="a", agent_id="agent://echo/main", at=500, inflight=20, capacity=12,
                              max_queue=32))
    assert load(tracker) == InstanceLoad(12, 0, 12, 32), "the report is newer than the heartbeat at 0"
    beat = A.model_copy(update={"heartbeat_at": 600, "inflight": 3})
    tracker.heartbeat(beat)
    assert tracker.load(beat) == InstanceLoad(3, 0, 8, 32)


def test_full_needs_busy_handlers_and_a_full_queue() -> None:
    assert InstanceLoad(7, 32, 8, 32).full
    assert not InstanceLoad(6, 40, 8, 32).full, "6 of 8 is not above 80%: its queue is most likely running"
    assert not InstanceLoad(8, 31, 8, 32).full
    assert InstanceLoad(9, 0, 10, 0).full, "no queue: shed once busy"
    assert InstanceLoad(8, 2, 8, 32).plus_routed() == InstanceLoad(8, 3, 8, 32)
    assert InstanceLoad(8, 32, 8, 32).ratio == 1.0 and InstanceLoad(0, 0, 0, 0).ratio == 0.0


def test_retry_after_from_the_drain_rate() -> None:
    assert retry_after_ms([InstanceLoad(4, 20, 4, 16, 4.0)]) == 1_250  # 5 must drain at 4/s
    assert retry_after_ms([InstanceLoad(4, 16, 4, 16, 1_000.0)]) == MIN_RETRY_AFTER_MS
    assert retry_after_ms([InstanceLoad(4, 16, 4, 16, 0.0)]) == MAX_RETRY_AFTER_MS, "nothing drains"
    assert retry_after_ms([InstanceLoad(4, 16, 4, 16, 0.001)]) == MAX_RETRY_AFTER_MS
    assert retry_after_ms([InstanceLoad(4, 16, 4, 16)]) == UNMEASURED_RETRY_AFTER_MS
    assert retry_after_ms([InstanceLoad(4, 16, 4, 16), InstanceLoad(4, 17, 4, 16, 2.0)]) == 1_000


def test_loads_on_demand_read_what_the_full_view_reads_and_keep_what_a_decision_set() -> None:
    tracker = LoadTracker()
    b = reg("b", max_concurrency=8, max_queue=32)
    tracker.heartbeat(A.model_copy(update={"inflight": 2}))
    tracker.report(report(200, 5, instance="b"))
    full = tracker.view([A, b])
    loads = tracker.on_demand({"a": A, "b": b})
    assert loads and "b" in loads and "c" not in loads
    assert loads.get("a") == full["a"] and loads["b"] == full["b"]
    assert loads.get("c") is None
    loads["a"] = full["a"].plus_routed()  # the batch's next decision sees the request it routed
    assert loads.get("a") == full["a"].plus_routed()
