"""The status table's transitions: first terminal wins, duplicates are harmless, replays reopen."""

from __future__ import annotations

from functools import reduce

from reach.records import ErrorInfo, Receipt, Status
from reach.status import StatusRow, expired, fold


def r(status: Status, at: int, *, generation: int = 0, attempt: int = 1, **kw: object) -> Receipt:
    return Receipt(message_id="m1", generation=generation, trace_id="t1", tenant="default", capability="demo.echo",
                   status=status, attempt=attempt, at=at, **kw)  # type: ignore[arg-type]


def run(*receipts: Receipt) -> StatusRow:
    row = reduce(fold, receipts, None)
    assert row is not None
    return row


def test_happy_path_builds_the_timeline() -> None:
    row = run(r(Status.ROUTED, 1), r(Status.STARTED, 2, instance_id="i1"), r(Status.COMPLETED, 3, result=b'{"x":1}'))
    assert row.status is Status.COMPLETED and row.terminal_at == 3 and row.result == '{"x":1}'
    assert [s.status for s in row.timeline] == [Status.ROUTED, Status.STARTED, Status.COMPLETED]


def test_routed_after_started_does_not_move_the_row_back() -> None:
    row = run(r(Status.STARTED, 2), r(Status.ROUTED, 1))
    assert row.status is Status.STARTED
    assert [s.status for s in row.timeline] == [Status.ROUTED, Status.STARTED]


def test_first_terminal_wins_and_late_receipts_only_extend_the_timeline() -> None:
    late = r(Status.FAILED, 9, error=ErrorInfo(kind="BUSINESS", code="X", message="late"))
    row = run(r(Status.STARTED, 1), r(Status.COMPLETED, 2), r(Status.COMPLETED, 2), late)
    assert row.status is Status.COMPLETED and row.terminal_at == 2
    assert [s.status for s in row.timeline] == [Status.STARTED, Status.COMPLETED, Status.FAILED]


def test_exact_duplicates_are_harmless() -> None:
    once = run(r(Status.STARTED, 1), r(Status.COMPLETED, 2))
    twice = run(r(Status.STARTED, 1), r(Status.STARTED, 1), r(Status.COMPLETED, 2), r(Status.COMPLETED, 2))
    assert once == twice


def test_retry_moves_to_the_next_attempt_and_keeps_the_last_error() -> None:
    boom = ErrorInfo(kind="TRANSIENT", code="BOOM", message="try again")
    row = run(r(Status.STARTED, 1), r(Status.ATTEMPT_FAILED, 2, error=boom), r(Status.RETRY_SCHEDULED, 3),
              r(Status.ROUTED, 4, attempt=2), r(Status.STARTED, 5, attempt=2))
    assert row.status is Status.STARTED and row.attempt == 2 and row.last_error == boom


def test_a_replay_generation_reopens_a_terminal_row() -> None:
    row = run(r(Status.DEAD_LETTERED, 1), r(Status.ROUTED, 5, generation=1), r(Status.COMPLETED, 6, generation=1))
    assert row.generation == 1 and row.status is Status.COMPLETED
    old = fold(row, r(Status.FAILED, 7))  # a late receipt of generation 0
    assert old.status is Status.COMPLETED and old.generation == 1 and len(old.timeline) == 4


def test_retention_starts_when_the_row_turns_terminal() -> None:
    row = run(r(Status.STARTED, 1), r(Status.COMPLETED, 1_000))
    assert not expired(row, now_ms=1_500, retention_ms=1_000)
    assert expired(row, now_ms=2_000, retention_ms=1_000)
    assert not expired(run(r(Status.STARTED, 1)), now_ms=10**12, retention_ms=1)


def test_routed_opens_a_delivery_window_that_started_closes() -> None:
    from reach.records import Decision

    routed = r(Status.ROUTED, 100, deadline=5_000, delivery_timeout_ms=400, instance_id="i1",
               decision=Decision(topic="ns.agent.a", partition=3, offset=42, picked_instance="i1"))
    row = run(routed)
    assert (row.delivery_due_at, row.inbox, row.routed_instance, row.deadline) == (500, ("ns.agent.a", 3, 42),
                                                                                  "i1", 5_000)
    started = run(routed, r(Status.STARTED, 200))
    assert started.delivery_due_at is None and started.deadline == 5_000


def test_stale_no_route_letters_count_only_old_unserved_ones() -> None:
    from reach.status import stale_no_route

    no_route = ErrorInfo(kind="NO_ROUTE", code="NO_ROUTE", message="nobody serves it")
    old = run(r(Status.DEAD_LETTERED, 1_000, error=no_route))
    assert stale_no_route([old], now_ms=2_000, threshold_ms=1_000, served=set()) == {"demo.echo": 1}
    assert stale_no_route([old], now_ms=1_500, threshold_ms=1_000, served=set()) == {}
    assert stale_no_route([old], now_ms=2_000, threshold_ms=1_000, served={"demo.echo"}) == {}
