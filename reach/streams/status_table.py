"""Receipts folded into the status table (changelog = the status topic) and a trace index, plus their views."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.web import Request, Response, View

from reach import codec
from reach.codec import DecodeError
from reach.metrics import Metrics
from reach.names import Names
from reach.records import TERMINAL, Receipt
from reach.status import StatusRow, expired, fold

log = logging.getLogger(__name__)
_TERMINAL = frozenset(s.value for s in TERMINAL)


@dataclass
class StatusTable:
    """Handles to the faust tables and counters, for views and metrics."""

    rows: Any
    traces: Any
    metrics: Metrics
    folded: int = 0
    tombstoned: int = 0
    # message_id -> when the timekeeper must next look at this open row (its deadline, or its delivery
    # timeout while ROUTED), so the 0.5 s tick reads only rows that are due, not the whole table
    watch: dict[str, int] = field(default_factory=dict)

    def get(self, message_id: str) -> StatusRow | None:
        raw = self.rows.get(message_id)
        return StatusRow.model_validate(raw) if raw else None

    def due_rows(self, now_ms: int) -> list[StatusRow]:
        """Open rows whose deadline or delivery timeout has come (rows gone or terminal are unwatched)."""
        found = []
        for message_id in [m for m, at in self.watch.items() if at <= now_ms]:
            row = self.get(message_id)
            if row is None or row.terminal:
                self.watch.pop(message_id, None)
            else:
                found.append(row)
        return found

    def track(self, message_id: str, raw: dict[str, Any] | None) -> None:
        at = _watch_at(raw)
        if at is None:
            self.watch.pop(message_id, None)
        else:
            self.watch[message_id] = at

    async def rebuild_watch(self) -> None:
        """After recovery from the changelog: which recovered rows the timekeeper must watch."""
        self.watch = {}
        for key, raw in list(self.rows.items()):
            self.track(key, raw)


def _watch_at(raw: dict[str, Any] | None) -> int | None:
    if not raw or raw.get("status") in _TERMINAL:
        return None
    times = [raw.get("deadline")]
    if raw.get("status") == "ROUTED":
        times.append(raw.get("delivery_due_at"))
    present = [t for t in times if t is not None]
    return min(present) if present else None


def attach_status_table(
    app: faust.App, names: Names, metrics: Metrics, *, partitions: int, retention_s: int
) -> StatusTable:
    """Define the status table, the trace index, the folding agents, the expiry timer and the HTTP views."""
    receipts = app.topic(names.receipts, key_type=bytes, value_type=bytes, value_serializer="raw",
                         partitions=partitions)
    changelog = app.topic(names.status, key_type=str, key_serializer="raw", value_serializer="json",
                          partitions=partitions, compacting=True, deleting=False)
    rows = app.Table("status", default=None, key_type=str, partitions=partitions,
                     changelog_topic=changelog)
    traces_changelog = app.topic(names.topic("status.traces"), key_type=str, key_serializer="raw",
                                 value_serializer="json", partitions=partitions, compacting=True, deleting=False)
    traces = app.Table("traces", default=list, key_type=str, partitions=partitions,
                       changelog_topic=traces_changelog)
    # faust serializes str keys as JSON ('"01J..."'); the status topic is keyed by the bare message_id
    # like every other topic, and recovery must decode what was written, so both tables use raw keys.
    rows.key_serializer = traces.key_serializer = "raw"  # type: ignore[attr-defined]
    handle = StatusTable(rows=rows, traces=traces, metrics=metrics)
    rows.on_recover(handle.rebuild_watch)
    by_trace = app.topic(names.topic("status.by-trace"), key_type=str, key_serializer="raw", value_serializer="json",
                         partitions=partitions, internal=True)

    @app.agent(receipts, name=f"{names.namespace}.status-fold")
    async def fold_receipts(stream: Any) -> None:
        async for value in stream:
            try:
                receipt = codec.decode(value, Receipt)
            except DecodeError as exc:
                metrics.undecodable.inc()
                log.warning("status: skipped an undecodable receipt (%s)", exc)
                continue
            try:
                before = handle.get(receipt.message_id)
                after = fold(before, receipt)
            except Exception:  # noqa: BLE001 - one bad row must not stop the fold (faust agents die silently)
                metrics.undecodable.inc()
                log.exception("status: could not fold a receipt of %s; skipped", receipt.message_id)
                continue
            if after != before:
                raw = after.model_dump(mode="json")
                rows[receipt.message_id] = raw
                handle.folded += 1
                handle.track(receipt.message_id, raw)
            metrics.observe(receipt, before, after)
            if before is None:
                await by_trace.send(key=receipt.trace_id, value=receipt.message_id)

    @app.agent(by_trace, name=f"{names.namespace}.trace-index")
    async def index_traces(stream: Any) -> None:
        async for event in stream.events():
            ids = list(traces[event.key])
            if event.value not in ids:
                traces[event.key] = [*ids, event.value]

    # faust lets only stream processing change a table key (it must know the event's partition), so the
    # timer finds expired rows and sends their ids, co-partitioned, to an agent that deletes them.
    expiry = app.topic(names.topic("status.expiry"), key_type=str, key_serializer="raw", value_serializer="json",
                       partitions=partitions, internal=True)

    @app.timer(interval=max(1.0, min(60.0, retention_s / 2)))
    async def find_old_rows() -> None:
        now = int(time.time() * 1000)
        try:
            old = [key for key, raw in list(rows.items())  # terminal_at first: validating every row is costly
                   if raw and raw.get("terminal_at") and now - raw["terminal_at"] >= retention_s * 1000
                   and expired(StatusRow.model_validate(raw), now, retention_s * 1000)]
            for key in old:
                await expiry.send(key=key, value=now)
        except Exception:  # noqa: BLE001 - an exception escaping a faust timer stops the worker
            log.exception("status: the retention sweep failed; trying again next tick")

    @app.agent(expiry, name=f"{names.namespace}.status-expiry")
    async def tombstone_rows(stream: Any) -> None:
        async for event in stream.events():
            raw = rows.get(event.key)
            if raw and expired(StatusRow.model_validate(raw), event.value, retention_s * 1000):
                del rows[event.key]  # faust writes a tombstone to the changelog
                handle.tombstoned += 1

    @app.page("/messages/{message_id}")
    @app.table_route(table=rows, match_info="message_id")
    async def message(web: View, request: Request, message_id: str) -> Response:
        row = rows.get(message_id)
        if not row:
            return web.json({"error": "not_found", "message": f"No message {message_id!r} in the status table. "
                             "Check the id, or it may be older than the retention period."}, status=404)
        return web.json(row)

    @app.page("/traces/{trace_id}")
    @app.table_route(table=traces, match_info="trace_id")
    async def trace(web: View, request: Request, trace_id: str) -> Response:
        ids = traces.get(trace_id)
        if not ids:
            return web.json({"error": "not_found", "message": f"No trace {trace_id!r}."}, status=404)
        return web.json({"trace_id": trace_id, "message_ids": ids})

    return handle
