"""The status table's transitions: first terminal wins, duplicates are harmless, replays reopen."""

from __future__ import annotations

from functools import reduce

from reach.core.lifecycle import StatusRow, expired, fold
from reach.records import ErrorInfo, Receipt, Status


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


def test_a_handoff_after_routed_moves_the_row_so_no_delivery_timeout_reroutes_it_again() -> None:
    from reach.core.deadlines import due_tasks
    from reach.records import Decision, IntentResolution

    routed = r(Status.ROUTED, 1, delivery_timeout_ms=5, deadline=10_000,
               decision=Decision(candidates=[], picked_instance="i1", topic="t.agent.a", partition=0, offset=7))
    assert [t.due.value for t in due_tasks([run(routed)], now_ms=100)] == ["reroute"]
    handed = r(Status.INTENT_RESOLVED, 3, resolution=IntentResolution(stage="handoff", intent="demo.echo"))
    row = run(routed, r(Status.ACCEPTED, 2, reroutes=1), handed)
    assert row.status is Status.INTENT_RESOLVED and row.delivery_due_at is None and row.inbox is None
    assert due_tasks([row], now_ms=100) == []  # its budget still ends it: EXPIRE at the deadline
    assert [t.due.value for t in due_tasks([row], now_ms=10_000)] == ["expire"]
    # a resolver's non-handoff step keeps its place before the router's
    semantic = r(Status.INTENT_RESOLVED, 3, resolution=IntentResolution(stage="semantic", intent="x"))
    assert run(routed, semantic).status is Status.ROUTED


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
    from reach.core.lifecycle import stale_no_route

    no_route = ErrorInfo(kind="NO_ROUTE", code="NO_ROUTE", message="nobody serves it")
    old = run(r(Status.DEAD_LETTERED, 1_000, error=no_route))
    assert stale_no_route([old], now_ms=2_000, threshold_ms=1_000, served=set()) == {"demo.echo": 1}
    assert stale_no_route([old], now_ms=1_500, threshold_ms=1_000, served=set()) == {}
    assert stale_no_route([old], now_ms=2_000, threshold_ms=1_000, served={"demo.echo"}) == {}


def test_rows_are_bounded_timeline_result_and_errors() -> None:
    from reach.core.lifecycle import MAX_ERROR_CHARS, MAX_RESULT_CHARS, MAX_STEPS

    huge = ErrorInfo(kind="TRANSIENT", code="BOOM", message="x" * 100_000)
    steps = [r(Status.ATTEMPT_FAILED, at, attempt=at, error=huge) for at in range(1, MAX_STEPS + 11)]
    row = run(*steps, r(Status.COMPLETED, 10_000, attempt=99, result=b'"' + b"y" * 200_000 + b'"'))
    assert len(row.timeline) == MAX_STEPS and row.dropped_steps == 11
    assert row.timeline[-1].status is Status.COMPLETED and row.timeline[0].at == 12
    assert row.result is not None and len(row.result) == MAX_RESULT_CHARS and row.result_truncated
    assert all(len(s.error.message) <= MAX_ERROR_CHARS + 1 for s in row.timeline if s.error)
    assert len(row.model_dump_json()) < 2 * MAX_RESULT_CHARS + MAX_STEPS * (MAX_ERROR_CHARS + 300)


def _settled(*receipts: tuple[Receipt, str | None]) -> tuple[StatusRow, list[bytes]]:
    from reach.core.lifecycle import settle_reply

    row, sent = None, []
    for receipt, reply_to in receipts:
        after = fold(row, receipt, reply_to=reply_to)
        after, reply = settle_reply(row, after, receipt, f"{receipt.status}@{receipt.at}".encode())
        if reply is not None:
            sent.append(reply)
        row = after
    assert row is not None
    return row, sent


def test_the_first_terminal_receipt_is_the_reply_once() -> None:
    row, sent = _settled((r(Status.ROUTED, 1), "ns.replies.c1"), (r(Status.STARTED, 2, instance_id="i"), None),
                         (r(Status.COMPLETED, 3, instance_id="i"), None),
                         (r(Status.COMPLETED, 3, instance_id="i"), None),
                         (r(Status.FAILED, 4, instance_id="i"), None))
    assert sent == [b"COMPLETED@3"] and row.replied and row.reply_to == "ns.replies.c1"


def test_a_terminal_receipt_before_its_routed_receipt_is_replied_when_reply_to_arrives() -> None:
    row, sent = _settled((r(Status.COMPLETED, 3, instance_id="i"), None), (r(Status.ROUTED, 1), "ns.replies.c1"),
                         (r(Status.ROUTED, 1, attempt=2), "ns.replies.c1"))
    assert sent == [b"COMPLETED@3"] and row.replied and row.pending_reply is None and row.status is Status.COMPLETED


def test_nobody_waits_without_reply_to_and_nothing_is_kept() -> None:
    row, sent = _settled((r(Status.COMPLETED, 3, instance_id="i"), None), (r(Status.ROUTED, 1), None))
    assert sent == [] and row.pending_reply is None and not row.replied
    row, sent = _settled((r(Status.REJECTED, 1), None))  # the router's own terminal: no race, nothing kept
    assert sent == [] and row.pending_reply is None


def test_a_replay_generation_gets_its_own_reply() -> None:
    row, sent = _settled((r(Status.UNROUTABLE, 1), "ns.replies.c1"),
                         (r(Status.ROUTED, 5, generation=1), "ns.replies.c2"),
                         (r(Status.COMPLETED, 6, generation=1, instance_id="i"), None))
    assert sent == [b"UNROUTABLE@1", b"COMPLETED@6"] and row.reply_to == "ns.replies.c2"


def test_a_routed_receipt_stamped_after_the_outcome_still_reads_first_in_its_attempt() -> None:
    row = run(r(Status.STARTED, 5), r(Status.COMPLETED, 6), r(Status.ROUTED, 7),
              r(Status.ROUTED, 9, attempt=2), r(Status.ATTEMPT_FAILED, 8))
    assert [(s.attempt, s.status) for s in row.timeline] == [
        (1, Status.ROUTED), (1, Status.STARTED), (1, Status.COMPLETED), (1, Status.ATTEMPT_FAILED),
        (2, Status.ROUTED)]


def test_a_turns_question_is_its_generations_reply_and_the_next_turn_gets_its_own() -> None:
    from reach.records import InputRequest

    question = InputRequest(question="Name?", turn=1)
    answered = InputRequest(question="Name?", turn=1, answer='"Ada"')
    row, sent = _settled((r(Status.ROUTED, 1), "ns.replies.c1"), (r(Status.STARTED, 2, instance_id="i"), None),
                         (r(Status.INPUT_REQUIRED, 3, instance_id="i", input=question), None),
                         (r(Status.ACCEPTED, 4, generation=1, input=answered), None),
                         (r(Status.ROUTED, 5, generation=1), "ns.replies.c2"),
                         (r(Status.COMPLETED, 6, generation=1, instance_id="i"), None))
    assert sent == [b"INPUT_REQUIRED@3", b"COMPLETED@6"] and row.reply_to == "ns.replies.c2"


def test_an_ending_that_carries_its_start_stands_for_the_skipped_started() -> None:
    from reach.core.lifecycle import STARTED_AT

    done = r(Status.COMPLETED, 9, instance_id="i1", timings={STARTED_AT: 4, "run_ms": 5})
    for row in (run(r(Status.ROUTED, 1, instance_id="i1"), done), run(done, r(Status.ROUTED, 1, instance_id="i1"))):
        assert row.status is Status.COMPLETED and row.terminal_at == 9
        assert [(s.status, s.at) for s in row.timeline] == [(Status.ROUTED, 1), (Status.STARTED, 4),
                                                            (Status.COMPLETED, 9)]
    had_started = run(r(Status.ROUTED, 1), r(Status.STARTED, 3), done)
    assert [s.status for s in had_started.timeline] == [Status.ROUTED, Status.STARTED, Status.COMPLETED], \
        "a run that did publish STARTED keeps its own step"
    assert [s.status for s in run(r(Status.ROUTED, 1), r(Status.COMPLETED, 9)).timeline] == [
        Status.ROUTED, Status.COMPLETED], "no start in its timings: no STARTED step is made up"
