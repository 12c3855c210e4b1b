"""Metrics derived from receipts agree with the status table's transitions."""

from __future__ import annotations

from reach.core.lifecycle import StatusRow, fold
from reach.metrics import Metrics
from reach.records import ErrorInfo, Receipt, Status


def r(mid: str, status: Status, at: int, attempt: int = 1, **kw: object) -> Receipt:
    return Receipt(message_id=mid, trace_id="t", tenant="d", capability="demo.echo", status=status, attempt=attempt,
                   at=at, **kw)  # type: ignore[arg-type]


def feed(metrics: Metrics, rows: dict[str, StatusRow], receipt: Receipt) -> None:
    before = rows.get(receipt.message_id)
    after = fold(before, receipt)
    rows[receipt.message_id] = after
    metrics.observe(receipt, before, after)


def value(m: Metrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    return got or 0.0


def test_terminal_counters_count_each_message_once() -> None:
    m, rows = Metrics(), {}
    for receipt in [r("a", Status.ROUTED, 0), r("a", Status.STARTED, 10), r("a", Status.COMPLETED, 30),
                    r("a", Status.COMPLETED, 30), r("a", Status.FAILED, 40),
                    r("b", Status.STARTED, 0), r("b", Status.RETRY_SCHEDULED, 5),
                    r("b", Status.STARTED, 20, attempt=2), r("b", Status.COMPLETED, 25, attempt=2),
                    r("c", Status.DEAD_LETTERED, 1, error=ErrorInfo(kind="NO_ROUTE", code="NO_ROUTE", message="x"))]:
        feed(m, rows, receipt)
    terminal = {s: value(m, "agentreach_messages_terminal_total", capability="demo.echo", status=s)
                for s in ("COMPLETED", "FAILED", "DEAD_LETTERED")}
    assert terminal == {"COMPLETED": 2, "FAILED": 0, "DEAD_LETTERED": 1}
    assert terminal["COMPLETED"] == sum(1 for row in rows.values() if row.status is Status.COMPLETED)
    assert value(m, "agentreach_completed_total", capability="demo.echo", first_attempt="true") == 1
    assert value(m, "agentreach_completed_total", capability="demo.echo", first_attempt="false") == 1
    assert value(m, "agentreach_retries_scheduled_total", capability="demo.echo") == 1
    assert value(m, "agentreach_dead_letters_total", capability="demo.echo", reason="NO_ROUTE") == 1
    assert value(m, "agentreach_delivery_latency_seconds_count", capability="demo.echo") == 1
    assert value(m, "agentreach_delivery_latency_seconds_sum", capability="demo.echo") == 0.01
    assert b"agentreach_receipts_total" in m.exposition()


def test_only_registered_capabilities_get_a_label_of_their_own() -> None:
    m, rows = Metrics(capabilities=lambda: {"demo.echo"}), {}
    feed(m, rows, r("a", Status.ROUTED, 0))
    for i in range(100):
        feed(m, rows, Receipt(message_id=f"x{i}", trace_id="t", tenant="d", capability=f"made.up{i}",
                              status=Status.ROUTED, at=0))
    assert value(m, "agentreach_receipts_total", capability="demo.echo", status="ROUTED") == 1
    assert value(m, "agentreach_receipts_total", capability="other", status="ROUTED") == 100
    assert value(m, "agentreach_receipts_total", capability="made.up1", status="ROUTED") == 0


def test_labels_are_bounded_without_a_registry() -> None:
    m, rows = Metrics(max_capabilities=3), {}
    for i in range(10):
        feed(m, rows, Receipt(message_id=f"x{i}", trace_id="t", tenant="d", capability=f"c{i}",
                              status=Status.ROUTED, at=0))
    assert value(m, "agentreach_receipts_total", capability="other", status="ROUTED") == 7


def test_dead_letter_reasons_are_bounded() -> None:
    m, rows = Metrics(), {}
    for i in range(80):
        feed(m, rows, r(f"d{i}", Status.DEAD_LETTERED, 1, error=ErrorInfo(kind="X", code=f"CODE{i}", message="")))
    assert value(m, "agentreach_dead_letters_total", capability="demo.echo", reason="CODE0") == 1
    assert value(m, "agentreach_dead_letters_total", capability="demo.echo", reason="other") == 30


def deliveries(m: Metrics) -> dict[str, float]:
    return {o: value(m, "agentreach_deliveries_total", capability="demo.echo", outcome=o)
            for o in ("in_time", "late", "timed_out")}


def test_each_routed_attempt_counts_one_delivery_outcome() -> None:
    m, rows = Metrics(), {}
    late = ErrorInfo(kind="DELIVERY", code="DELIVERY_TIMEOUT", message="i-1 did not start it within 100 ms")
    for receipt in [
        # in time: STARTED 50 ms after ROUTED, within its 100 ms delivery timeout; duplicates count nothing
        r("a", Status.ROUTED, 0, delivery_timeout_ms=100), r("a", Status.STARTED, 50), r("a", Status.STARTED, 50),
        r("a", Status.COMPLETED, 60),
        # late: STARTED after the due time, before the timekeeper acted
        r("b", Status.ROUTED, 0, delivery_timeout_ms=100), r("b", Status.STARTED, 150),
        # timed out: the timekeeper's retry; the agent's STARTED of that attempt afterwards counts nothing more
        r("c", Status.ROUTED, 0, delivery_timeout_ms=100),
        r("c", Status.RETRY_SCHEDULED, 120, error=late), r("c", Status.STARTED, 130),
        # the next attempt starts in time
        r("c", Status.ROUTED, 200, attempt=2, delivery_timeout_ms=100), r("c", Status.STARTED, 210, attempt=2),
        # the agent's STARTED read before the router's ROUTED (produced from the forward's report): in time, once
        r("d", Status.STARTED, 10), r("d", Status.ROUTED, 5, delivery_timeout_ms=100), r("d", Status.ROUTED, 5,
                                                                                         delivery_timeout_ms=100),
    ]:
        feed(m, rows, receipt)
    assert deliveries(m) == {"in_time": 3, "late": 1, "timed_out": 1}


def test_a_delivery_timeout_that_dead_letters_counts_as_timed_out_and_a_started_row_does_not() -> None:
    m, rows = Metrics(), {}
    gone = ErrorInfo(kind="DELIVERY", code="RETRIES_EXHAUSTED", message="3 of 3 attempts failed; last: ...")
    for receipt in [r("a", Status.ROUTED, 0, attempt=3, delivery_timeout_ms=100),
                    r("a", Status.DEAD_LETTERED, 200, attempt=3, error=gone),
                    # the timekeeper raced an agent that had started: not a delivery failure
                    r("b", Status.ROUTED, 0, delivery_timeout_ms=100), r("b", Status.STARTED, 90),
                    r("b", Status.RETRY_SCHEDULED, 110, error=gone)]:
        feed(m, rows, receipt)
    assert deliveries(m) == {"in_time": 1, "late": 0, "timed_out": 1}


def test_callbacks_due_and_effective_count_once_per_generation() -> None:
    m, rows = Metrics(), {}
    spec = "webhook:https://example.com/hook"
    feed(m, rows, r("a", Status.ROUTED, 0, callback=spec))
    for at in (10, 10):  # the fold sends the callback at the first terminal; the same receipt again sends nothing
        before = rows["a"]
        after = fold(before, r("a", Status.COMPLETED, at))
        after = after.model_copy(update={"callback_sent": True})
        rows["a"] = after
        m.observe(r("a", Status.COMPLETED, at), before, after)
    callbacked = r("a", Status.CALLBACKED, 40)
    feed(m, rows, callbacked)
    feed(m, rows, callbacked)  # at least once: the duplicate changes nothing
    feed(m, rows, r("b", Status.ROUTED, 0, callback=spec))
    before = rows["b"]
    after = fold(before, r("b", Status.FAILED, 20)).model_copy(update={"callback_sent": True})
    m.observe(r("b", Status.FAILED, 20), before, after)  # its callback never reached DELIVERED
    assert value(m, "agentreach_callbacks_due_total", capability="demo.echo") == 2
    assert value(m, "agentreach_callbacks_effective_total", capability="demo.echo") == 1
