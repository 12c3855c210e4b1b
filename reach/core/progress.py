"""Progress and partial results (pure): the agent SDK's coalescer and the status row's bounded chunk log.

A handler reports `ctx.progress(fraction, note)` and `ctx.emit(chunk)` as often as it likes; the SDK turns
them into at most one PROGRESS receipt per interval (100 ms by default), each bounded in size, so a chatty
handler cannot flood the receipts topic (docs/agents.md#progress-and-partial-results). `Coalescer` holds
what is pending between two receipts: consecutive text chunks that append merge into one, a replacing chunk
drops what is pending before it, the last fraction and note win. `Chunks` is what the status row keeps:
the chunks of the current attempt, at most `MAX_ROW_CHUNKS` and `MAX_ROW_CHUNK_CHARS` (oldest dropped and
counted), deduplicated by their `seq`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from reach.errors import ReachError
from reach.records import Chunk, Progress

INTERVAL_MS = 100  # at most one PROGRESS receipt per interval and attempt
MAX_CHUNK_BYTES = 32 * 1024  # one ctx.emit
MAX_PENDING_BYTES = 256 * 1024  # one PROGRESS receipt's chunks; past it ctx.emit waits for the next receipt
MAX_NOTE_CHARS = 512
MAX_ROW_CHUNKS = 256  # the status row keeps at most this many chunks of the current attempt
MAX_ROW_CHUNK_CHARS = 64 * 1024  # and at most this many characters of chunk data


class BadProgress(ReachError, ValueError):
    """A handler's ctx.progress or ctx.emit was given something the SDK cannot send; the handler decides."""


def checked_fraction(fraction: float | None) -> float | None:
    """`fraction` as a float in [0, 1] (None: no fraction); anything else raises BadProgress."""
    if fraction is None:
        return None
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction) \
            or not 0 <= fraction <= 1:
        raise BadProgress(f"ctx.progress takes a fraction between 0 and 1 (or None); got {fraction!r}.")
    return float(fraction)


def checked_note(note: str | None) -> str | None:
    if note is None:
        return None
    if not isinstance(note, str):
        raise BadProgress(f"ctx.progress takes a text note (or None); got {type(note).__name__}.")
    return note[:MAX_NOTE_CHARS]


def chunk_of(value: Any, *, max_bytes: int = MAX_CHUNK_BYTES) -> tuple[str, str]:
    """(kind, data) for one ctx.emit: a str is text, anything else one JSON document; BadProgress when it is
    not JSON-serialisable or over `max_bytes` (UTF-8)."""
    if isinstance(value, str):
        kind, data = "text", value
    else:
        try:
            kind, data = "json", json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise BadProgress(f"ctx.emit takes text or a JSON-serialisable value; {type(value).__name__} is "
                              f"neither ({exc}).") from None
    size = len(data.encode())
    if size > max_bytes:
        raise BadProgress(f"a chunk takes {size} bytes; at most {max_bytes} fit in one ctx.emit. Emit it in "
                          "smaller parts, or return it as the result.")
    return kind, data


class Coalescer:
    """What is pending between two PROGRESS receipts of one attempt, and when the next one is due.

    `take(now_ms)` returns the Progress to publish (or None when there is nothing new) and starts the next
    interval; `due_at` says when a take is allowed; `full` says the pending chunks reached their bound."""

    def __init__(self, *, interval_ms: int = INTERVAL_MS, max_chunk_bytes: int = MAX_CHUNK_BYTES,
                 max_pending_bytes: int = MAX_PENDING_BYTES, replace_first: bool = False) -> None:
        self.interval_ms = interval_ms
        self.max_chunk_bytes = max_chunk_bytes
        self.max_pending_bytes = max_pending_bytes
        self._pending: list[tuple[str, str, bool]] = []  # (kind, data, append)
        self._pending_bytes = 0
        self._fraction: float | None = None
        self._note: str | None = None
        self._dirty = False
        self._next_seq = 0
        self._last_at: int | None = None
        # a retried attempt starts over: its first chunk replaces what an earlier attempt streamed
        self._replace_next = replace_first

    @property
    def pending(self) -> bool:
        return self._dirty

    @property
    def full(self) -> bool:
        return self._pending_bytes >= self.max_pending_bytes

    def due_at(self) -> int:
        """The earliest time (ms) the next PROGRESS receipt may go."""
        return 0 if self._last_at is None else self._last_at + self.interval_ms

    def progress(self, fraction: float | None, note: str | None) -> None:
        self._fraction, self._note = checked_fraction(fraction), checked_note(note)
        self._dirty = True

    def emit(self, value: Any, *, append: bool = True) -> None:
        kind, data = chunk_of(value, max_bytes=self.max_chunk_bytes)
        if self._replace_next:
            append, self._replace_next = False, False
        size = len(data.encode())
        if not append:
            self._pending, self._pending_bytes = [], 0  # superseded before anyone saw them
        last = self._pending[-1] if self._pending else None
        if (append and kind == "text" and last is not None and last[0] == "text"
                and len(last[1].encode()) + size <= self.max_chunk_bytes):
            self._pending[-1] = (last[0], last[1] + data, last[2])
        else:
            self._pending.append((kind, data, append))
        self._pending_bytes += size
        self._dirty = True

    def take(self, now_ms: int) -> Progress | None:
        """The Progress for the next receipt (chunks numbered on), or None when nothing changed."""
        if not self._dirty:
            return None
        chunks = []
        for kind, data, append in self._pending:
            chunks.append(Chunk(seq=self._next_seq, kind=kind, data=data, append=append))
            self._next_seq += 1
        progress = Progress(fraction=self._fraction, note=self._note, chunks=chunks)
        self._pending, self._pending_bytes, self._dirty, self._last_at = [], 0, False, now_ms
        return progress


class Chunks(BaseModel):
    """The status row's progress: the last fraction and note, and the chunks of its attempt (bounded)."""

    model_config = ConfigDict(frozen=True)

    attempt: int
    fraction: float | None = None
    note: str | None = None
    at: int = 0
    chunks: list[Chunk] = []
    next_seq: int = 0  # the seq the next new chunk has; a lower one is a duplicate
    dropped: int = 0  # oldest chunks dropped to keep the bounds (a reader that missed them sees a seq gap)


def fold_progress(current: Chunks | None, attempt: int, progress: Progress, at: int) -> Chunks:
    """Apply one PROGRESS receipt's Progress; a newer attempt starts over, an older one changes nothing."""
    if current is not None and attempt < current.attempt:
        return current
    if current is None or attempt > current.attempt:
        current = Chunks(attempt=attempt)
    chunks, next_seq, dropped = list(current.chunks), current.next_seq, current.dropped
    for chunk in progress.chunks:
        if chunk.seq < next_seq:
            continue  # a receipt written twice (a republish) or folded again
        if not chunk.append:
            chunks = []
        chunks.append(chunk)
        next_seq = chunk.seq + 1
    size = sum(len(c.data) for c in chunks)
    while chunks and (len(chunks) > MAX_ROW_CHUNKS or size > MAX_ROW_CHUNK_CHARS):
        size -= len(chunks.pop(0).data)
        dropped += 1
    fraction = progress.fraction if progress.fraction is not None else current.fraction
    note = progress.note if progress.note is not None else current.note
    return current.model_copy(update={"fraction": fraction, "note": note, "at": max(at, current.at),
                                      "chunks": chunks, "next_seq": next_seq, "dropped": dropped})


class Cursor(BaseModel):
    """How far a reader of a status row's progress got: the attempt, the next seq, the progress it last saw."""

    model_config = ConfigDict(frozen=True)

    attempt: int = 0
    next_seq: int = 0
    fraction: float | None = None
    note: str | None = None
    generation: int = 0  # a multi-turn message's next turn is a new generation: its attempts count from 1 again


def news(progress: Chunks | None, cursor: Cursor) -> tuple[list[Chunk], bool, Cursor]:
    """The chunks a reader at `cursor` has not seen (a newer attempt's from its first), whether the fraction or
    note changed, and the cursor after them. A chunk the row already dropped is a gap in the seqs."""
    if progress is None or progress.attempt < cursor.attempt:
        return [], False, cursor
    start = cursor.next_seq if progress.attempt == cursor.attempt else 0
    fresh = [c for c in progress.chunks if c.seq >= start]
    moved = (progress.fraction, progress.note) != (cursor.fraction, cursor.note)
    after = Cursor(attempt=progress.attempt, next_seq=fresh[-1].seq + 1 if fresh else start,
                   fraction=progress.fraction, note=progress.note, generation=cursor.generation)
    return fresh, moved, after
