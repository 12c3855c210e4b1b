"""The timekeeper's decisions: expire spent budgets, reroute what was not picked up in time."""

from __future__ import annotations

from reach.core.deadlines import Due, due_tasks
from reach.core.lifecycle import StatusRow, fold
from reach.records import Decision, Receipt, Status


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


def test_a_delivery_timeout_out_of_reroutes_whose_retry_would_pass_the_deadline_expires() -> None:
    """The timekeeper's path through `after_failure`: out of reroutes it is a failed attempt, and a retry
    that would be due after the deadline is not scheduled."""
    from reach.core.retry import MAX_REROUTES, Action, Failure, Limits
    from reach.envelopes import new_envelope
    from reach.failures import after_failure
    from reach.names import Names
    from reach.records import ErrorInfo

    env = new_envelope("demo.echo", {}, budget_ms=1_000).model_copy(update={"reroutes": MAX_REROUTES})
    late = ErrorInfo(kind="DELIVERY", code="DELIVERY_TIMEOUT", message="i-1 did not start it within 5000 ms")
    decided = after_failure(Failure.DELIVERY, env, error=late, names=Names("ns"), tiers=["1s"],
                            limits=Limits(base_ms=2_000), now_ms=env.created_at + 500, failed_instance="i-1",
                            raw=b"raw", origin=("ns.agent.x", 0, 1))
    assert decided.action is Action.EXPIRE and decided.receipt.status is Status.EXPIRED
    assert [r.topic for r in decided.records] == ["ns.receipts"]
