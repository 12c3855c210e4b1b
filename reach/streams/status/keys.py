"""The key layout of a status partition store: rows and the indexes the fold keeps beside them (pure).

Every index entry is derived from one row, so writing or deleting a row rewrites exactly its own
entries and nothing ever scans the table: the timekeeper reads the due index up to now, retention
the terminal index up to now - retention, `GET /traces/{id}` one trace prefix, the stale NO_ROUTE
gauge the no-route index. Times are 8-byte big-endian, so byte order is time order.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from reach.streams.status import tenants

ROW = b"r"
DUE = b"d"  # deadline, or delivery timeout while ROUTED: the timekeeper's watch
TERMINAL = b"x"  # terminal_at: retention
TRACE = b"t"  # trace_id \0 message_id -> first seen at
NO_ROUTE = b"n"  # NO_ROUTE dead letters by terminal_at -> capability
META_CHANGELOG = b"m:changelog"  # next offset of the changelog partition this store reflects
META_ROWS = b"m:rows"

_TIME = struct.Struct(">Q")
_TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "REJECTED", "UNROUTABLE", "EXPIRED", "DEAD_LETTERED",
                                "CANCELED"})


def row_key(message_id: str) -> bytes:
    return ROW + message_id.encode()


def time_bytes(ms: int) -> bytes:
    return _TIME.pack(max(0, ms))


def until(prefix: bytes, ms: int) -> bytes:
    """The first key of `prefix` after every entry timed at or before `ms`."""
    return prefix + time_bytes(ms + 1)


def timed_id(key: bytes) -> tuple[int, str]:
    """(time, message_id) of a DUE / TERMINAL / NO_ROUTE key."""
    return _TIME.unpack_from(key, 1)[0], key[9:].decode()


def read_time(raw: bytes) -> int:
    value: int = _TIME.unpack(raw)[0]
    return value


def trace_prefix(trace_id: str) -> bytes:
    return TRACE + trace_id.encode() + b"\x00"


def watch_at(row: Mapping[str, Any]) -> int | None:
    """When the timekeeper must next look at an open row; None for terminal rows or rows with no clock."""
    if row.get("status") in _TERMINAL_STATUSES:
        return None
    times = [row.get("deadline")]
    if row.get("status") == "ROUTED":
        times.append(row.get("delivery_due_at"))
    present = [t for t in times if t is not None]
    return min(present) if present else None


def index_entries(row: Mapping[str, Any] | None) -> dict[bytes, bytes]:
    """Every index entry (key -> value) a row (the JSON dict of a StatusRow) keeps in its store."""
    if not row:
        return {}
    mid = row["message_id"].encode()
    entries: dict[bytes, bytes] = {}
    due = watch_at(row)
    if due is not None:
        entries[DUE + time_bytes(due) + mid] = b""
    terminal_at = row.get("terminal_at")
    if terminal_at is not None and row.get("status") in _TERMINAL_STATUSES:
        entries[TERMINAL + time_bytes(terminal_at) + mid] = b""
        error = row.get("last_error") or {}
        if row.get("status") == "DEAD_LETTERED" and error.get("code") == "NO_ROUTE":
            entries[NO_ROUTE + time_bytes(terminal_at) + mid] = row.get("capability", "").encode()
    if row.get("trace_id"):
        timeline = row.get("timeline") or []
        first = timeline[0]["at"] if timeline else row.get("updated_at", 0)
        entries[trace_prefix(row["trace_id"]) + mid] = time_bytes(first)
    entries.update(tenants.entries(row))  # a tenant's tasks by update (A2A ListTasks)
    return entries
