"""The coalescer of ctx.progress / ctx.emit and the status row's bounded chunk log (pure)."""

from __future__ import annotations

import math

import pytest

from reach.core.progress import (
    MAX_ROW_CHUNK_CHARS,
    MAX_ROW_CHUNKS,
    BadProgress,
    Coalescer,
    fold_progress,
)
from reach.records import Chunk, Progress


def test_consecutive_text_chunks_merge_and_number_on_per_take() -> None:
    c = Coalescer(interval_ms=100)
    c.emit("a")
    c.emit("b")
    c.emit({"k": 1})
    c.progress(0.5, "half")
    first = c.take(1_000)
    assert first is not None and first.fraction == 0.5 and first.note == "half"
    assert [(x.seq, x.kind, x.data, x.append) for x in first.chunks] == [(0, "text", "ab", True),
                                                                         (1, "json", '{"k":1}', True)]
    assert c.due_at() == 1_100 and c.take(1_200) is None  # nothing new: no receipt
    c.emit("c")
    [third] = (c.take(1_300) or Progress()).chunks
    assert third.seq == 2


def test_a_replacing_chunk_drops_what_is_pending_before_it() -> None:
    c = Coalescer()
    c.emit("draft 1")
    c.emit("draft 2", append=False)
    taken = c.take(0)
    assert taken is not None and [(x.data, x.append) for x in taken.chunks] == [("draft 2", False)]


def test_a_retried_attempt_starts_with_a_replacing_chunk() -> None:
    c = Coalescer(replace_first=True)
    c.emit("again")
    c.emit(" and on")
    taken = c.take(0)
    assert taken is not None and [(x.data, x.append) for x in taken.chunks] == [("again and on", False)]


@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan, math.inf, "0.5", True])
def test_a_fraction_outside_zero_to_one_is_refused_clearly(bad: object) -> None:
    with pytest.raises(BadProgress, match="between 0 and 1"):
        Coalescer().progress(bad, None)  # type: ignore[arg-type]


def test_chunks_over_the_bound_or_not_json_are_refused_and_nothing_is_kept() -> None:
    c = Coalescer(max_chunk_bytes=10)
    with pytest.raises(BadProgress, match="at most 10"):
        c.emit("x" * 11)
    with pytest.raises(BadProgress, match="JSON-serialisable"):
        c.emit(object())
    assert not c.pending and c.take(0) is None


def test_pending_chunks_report_full_at_their_bound_and_merges_stay_within_the_chunk_bound() -> None:
    c = Coalescer(max_chunk_bytes=4, max_pending_bytes=8)
    for _ in range(4):
        c.emit("ab")
    assert c.full
    taken = c.take(0)
    assert taken is not None and [x.data for x in taken.chunks] == ["abab", "abab"]
    assert not c.full


def test_the_row_keeps_chunks_once_by_seq_and_a_replace_restarts_them() -> None:
    p1 = Progress(fraction=0.2, chunks=[Chunk(seq=0, kind="text", data="a"), Chunk(seq=1, kind="text", data="b")])
    row = fold_progress(None, 1, p1, 10)
    assert fold_progress(row, 1, p1, 10) == row  # the same receipt again changes nothing
    row = fold_progress(row, 1, Progress(note="n", chunks=[Chunk(seq=2, kind="text", data="c", append=False)]), 20)
    assert [c.data for c in row.chunks] == ["c"] and row.fraction == 0.2 and row.note == "n" and row.next_seq == 3
    assert fold_progress(row, 0, p1, 30) == row  # an older attempt's late receipt
    newer = fold_progress(row, 2, Progress(chunks=[Chunk(seq=0, kind="text", data="z", append=False)]), 40)
    assert newer.attempt == 2 and [c.data for c in newer.chunks] == ["z"]


def test_the_row_keeps_at_most_its_bound_and_counts_what_it_dropped() -> None:
    row = None
    seq = 0
    for _ in range(MAX_ROW_CHUNKS * 2):
        row = fold_progress(row, 1, Progress(chunks=[Chunk(seq=seq, kind="text", data="x" * 1000)]), seq)
        seq += 1
    assert row is not None
    assert len(row.chunks) <= MAX_ROW_CHUNKS and sum(len(c.data) for c in row.chunks) <= MAX_ROW_CHUNK_CHARS
    assert row.dropped == seq - len(row.chunks) and row.chunks[-1].seq == seq - 1


def test_a_reader_sees_each_chunk_once_and_a_newer_attempt_from_its_start() -> None:
    from reach.core.progress import Cursor, news

    row = fold_progress(None, 1, Progress(fraction=0.1, chunks=[Chunk(seq=0, kind="text", data="a")]), 1)
    fresh, moved, cursor = news(row, Cursor())
    assert [c.data for c in fresh] == ["a"] and moved
    assert news(row, cursor) == ([], False, cursor)
    row = fold_progress(row, 1, Progress(fraction=0.1, chunks=[Chunk(seq=1, kind="text", data="b")]), 2)
    fresh, moved, cursor = news(row, cursor)
    assert [c.data for c in fresh] == ["b"] and not moved
    retry = fold_progress(row, 2, Progress(chunks=[Chunk(seq=0, kind="text", data="z", append=False)]), 3)
    fresh, _, cursor = news(retry, cursor)
    assert [(c.data, c.append) for c in fresh] == [("z", False)] and cursor.attempt == 2
    assert news(None, cursor) == ([], False, cursor)
