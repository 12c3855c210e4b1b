"""PROGRESS receipts in the status fold: the row keeps the last progress and the chunks, never a new status."""

from __future__ import annotations

from functools import reduce

from reach.core.deadlines import due_tasks
from reach.core.lifecycle import StatusRow, fold
from reach.records import Chunk, Progress, Receipt, Status


def r(status: Status, at: int, *, generation: int = 0, attempt: int = 1, **kw: object) -> Receipt:
    return Receipt(message_id="m1", generation=generation, trace_id="t1", tenant="default", capability="demo.write",
                   status=status, attempt=attempt, at=at, **kw)  # type: ignore[arg-type]


def progress(at: int, *chunks: str, first: int = 0, fraction: float | None = None, **kw: object) -> Receipt:
    body = Progress(fraction=fraction, chunks=[Chunk(seq=first + i, kind="text", data=c) for i, c in enumerate(chunks)])
    return r(Status.PROGRESS, at, progress=body, **kw)


def run(*receipts: Receipt) -> StatusRow:
    row = reduce(fold, receipts, None)
    assert row is not None
    return row


def test_progress_keeps_the_status_the_timeline_and_the_timers_and_collects_the_chunks() -> None:
    started = run(r(Status.ROUTED, 1, delivery_timeout_ms=5, deadline=10_000), r(Status.STARTED, 2))
    row = run(r(Status.ROUTED, 1, delivery_timeout_ms=5, deadline=10_000), r(Status.STARTED, 2),
              progress(3, "Once ", fraction=0.2), progress(4, "upon", first=1, fraction=0.4))
    assert row.status is Status.STARTED and row.timeline == started.timeline
    assert row.updated_at == started.updated_at and due_tasks([row], now_ms=100) == due_tasks([started], now_ms=100)
    assert row.progress is not None and row.progress.fraction == 0.4
    assert "".join(c.data for c in row.progress.chunks) == "Once upon"


def test_the_completed_receipt_still_ends_the_row_and_later_progress_changes_nothing() -> None:
    done = run(r(Status.STARTED, 2), progress(3, "a"), r(Status.COMPLETED, 4, result=b'"a"'))
    assert done.status is Status.COMPLETED and done.result == '"a"'
    assert done.progress is not None and [c.data for c in done.progress.chunks] == ["a"]
    assert fold(done, progress(5, "late", first=1)) == done


def test_progress_of_another_generation_is_ignored() -> None:
    row = run(r(Status.STARTED, 2, generation=1))
    assert fold(row, progress(3, "old", generation=0)) == row


def test_a_row_written_before_progress_existed_still_reads() -> None:
    old = run(r(Status.STARTED, 2)).model_dump(mode="json")
    old.pop("progress")
    row = StatusRow.model_validate(old)
    assert row.progress is None and fold(row, progress(3, "x")).progress is not None


def test_progress_of_a_newer_generation_reads_as_started_and_keeps_the_older_timeline() -> None:
    done = run(r(Status.STARTED, 1), r(Status.COMPLETED, 2))
    row = fold(done, progress(3, "again", generation=1))
    assert (row.generation, row.status, row.terminal_at) == (1, Status.STARTED, None)
    assert row.timeline == done.timeline and row.progress is not None and row.progress.chunks[0].data == "again"
