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
