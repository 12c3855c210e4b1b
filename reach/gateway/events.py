"""`GET /v1/messages/{id}/events`: the status row's timeline as Server-Sent Events, until it is terminal.

The status table (the stream app's views) is the source: the stream re-reads the row every `poll_s`
and sends each timeline entry once, in order (`id:` is its index, so `Last-Event-ID` resumes); the
entry that makes the row terminal is sent as `event: terminal` and the stream closes. A handler's progress
and partial results (the row's `progress`, from PROGRESS receipts) go as `event: progress` and `event: chunk`
frames without an id, each chunk once and before the entry that ends the row; a resumed stream sends the
chunks the row still holds again (their `seq` tells a reader which it has).

A row whose ending went on to its capability's fallback (its `fallback.message_id`, docs/decisions/0034) does not
end the stream: its last entry goes as `event: receipt`, then `event: fallback` names the child, and the child's
row is streamed on (ids continue after the request's entries), so `event: terminal` is the chain's final ending."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from reach.core.progress import Chunks, Cursor, news
from reach.gateway.deps import StatusSource
from reach.invoke import MAX_CHAIN
from reach.records import Status

KEEP_ALIVE_S = 15.0


def frame(event: str, data: Any, event_id: int | None = None) -> bytes:
    """One SSE frame; the JSON is on one line, so it needs no `data:` continuation."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def is_terminal(row: dict[str, Any]) -> bool:
    try:
        return Status(row.get("status", "")).is_terminal
    except ValueError:
        return False


Step = tuple[str, Any, int | None]
"""One step of a message as a stream sends it: the event (receipt, terminal, progress, chunk, timeout), its data,
and the timeline index (receipts only). SSE writes it as a frame; gRPC's WatchSteps as a `Step` message."""


def new_steps(row: dict[str, Any], sent: int, *, base: int = 0,
              followed: bool = False) -> tuple[list[Step], int, bool]:
    """Steps for the entries after the first `sent` (indexes from `base`); the new count; whether the row is done.
    `followed`: a fallback child comes next, so the row's last entry is a `receipt`, not the `terminal`."""
    timeline = row.get("timeline") or []
    done = is_terminal(row)
    steps: list[Step] = []
    for index in range(sent, len(timeline)):
        last = done and not followed and index == len(timeline) - 1
        steps.append(("terminal" if last else "receipt", timeline[index], base + index))
    return steps, max(sent, len(timeline)), done


def fallback_child(row: dict[str, Any]) -> str | None:
    """The fallback child a terminal row's ending went on to (the status fold names it), else None."""
    ref = row.get("fallback")
    child = ref.get("message_id") if isinstance(ref, dict) else None
    return child if isinstance(child, str) and child.startswith(f"{row.get('message_id')}-fb") else None


def progress_steps(row: dict[str, Any], cursor: Cursor) -> tuple[list[Step], Cursor]:
    """`progress` and `chunk` steps for what the row shows past `cursor`, and the cursor after them."""
    generation = int(row.get("generation") or 0)
    if generation != cursor.generation:  # the next turn of a multi-turn message: its chunks are numbered afresh
        cursor = Cursor(generation=generation)
    raw = row.get("progress")
    if raw is None:
        return [], cursor
    chunks, moved, cursor = news(Chunks.model_validate(raw), cursor)
    steps: list[Step] = [("progress", {"fraction": cursor.fraction, "note": cursor.note}, None)] if moved else []
    for chunk in chunks:
        data = json.loads(chunk.data) if chunk.kind == "json" else chunk.data
        steps.append(("chunk", {"seq": chunk.seq, "kind": chunk.kind, "data": data, "append": chunk.append,
                                "attempt": cursor.attempt}, None))
    return steps, cursor


async def find_row(status: StatusSource, message_id: str, *, wait_s: float,
                   poll_s: float) -> tuple[int, dict[str, Any]]:
    """The row, waiting up to wait_s for a message the status table has not folded yet (a fresh 202)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + wait_s
    while True:
        code, body = await status.message(message_id)
        if code == 200 or loop.time() >= give_up:
            return code, body
        await asyncio.sleep(poll_s)


async def step_stream(status: StatusSource, message_id: str, first: dict[str, Any], *, sent: int, poll_s: float,
                      max_s: float, clock: Callable[[], float]) -> AsyncIterator[Step | None]:
    """Steps until the row is terminal or max_s passed (then a `timeout` step); None after KEEP_ALIVE_S without one
    (SSE writes a keep-alive comment)."""
    started = quiet_since = clock()
    row, base, hops = first, 0, 0  # base: the entries of the chain's earlier rows (ids go on after them)
    cursor = Cursor()
    while True:
        partial, cursor = progress_steps(row, cursor)
        child = fallback_child(row) if is_terminal(row) and hops < MAX_CHAIN else None
        steps, seen, done = new_steps(row, max(sent - base, 0), base=base, followed=child is not None)
        sent = base + seen
        steps = partial + steps
        if done and child is not None:
            steps.append(("fallback", {"message_id": message_id, "status": row.get("status"), "child": child,
                                       "capability": row["fallback"].get("capability")}, None))
        for step in steps:
            yield step
        now = clock()
        if steps:
            quiet_since = now
        if done and child is None:
            return
        if done and child is not None:  # the child's row next (it may not be folded yet: an empty row till then)
            base += len(row.get("timeline") or [])
            hops, message_id, row, cursor = hops + 1, child, {}, Cursor()
            continue
        if now - started >= max_s:
            yield ("timeout", {"message_id": message_id, "status": row.get("status"),
                               "message": f"the stream closes after {max_s:g}s; reconnect with "
                               "Last-Event-ID to resume"}, None)
            return
        if now - quiet_since >= KEEP_ALIVE_S:
            yield None
            quiet_since = now
        await asyncio.sleep(poll_s)
        code, body = await status.message(message_id)
        if code == 200:
            row = body  # a 503 (status partition moving) keeps the last row and tries again


async def receipt_stream(status: StatusSource, message_id: str, first: dict[str, Any], *, sent: int, poll_s: float,
                         max_s: float, clock: Callable[[], float]) -> AsyncIterator[bytes]:
    """SSE frames until the row is terminal or max_s passed (then `event: timeout`); keep-alive comments between."""
    async for step in step_stream(status, message_id, first, sent=sent, poll_s=poll_s, max_s=max_s, clock=clock):
        yield b": keep-alive\n\n" if step is None else frame(*step)
