"""The timekeeper's decisions: expire spent budgets, reroute what was not picked up in time."""

from __future__ import annotations

from reach.records import Decision, Receipt, Status
from reach.status import StatusRow, fold
from reach.timekeeper import Due, due_tasks


def row(*steps: tuple[Status, int]) -> StatusRow:
    out = None
    for status, at in steps:
        out = fold(out, Receipt(message_id="m", trace_id="t", tenant="d", capability="c", status=status, at=at,
                                deadline=10_000, delivery_timeout_ms=1_000, instance_id="i1",
                                decision=Decision(topic="ns.agent.x", partition=0, offset=5)))
    assert out is not None
    return out


def test_routed_and_not_started_is_rerouted_after_the_delivery_timeout() -> None:
    routed = row((Status.ROUTED, 100))
    assert due_tasks([routed], 1_099) == []
    [task] = due_tasks([routed], 1_100)
    assert task.due is Due.REROUTE and task.mark == ("m", 0, 1_100, "reroute")
    assert due_tasks([row((Status.ROUTED, 100), (Status.STARTED, 300))], 5_000) == []


def test_a_spent_budget_expires_whatever_the_step_and_terminal_rows_are_left_alone() -> None:
    assert [t.due for t in due_tasks([row((Status.ROUTED, 0), (Status.STARTED, 1))], 10_000)] == [Due.EXPIRE]
    assert due_tasks([row((Status.STARTED, 1), (Status.COMPLETED, 2))], 99_999) == []
