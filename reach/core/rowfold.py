"""The status row fold on plain dicts: `reach.core.lifecycle.fold` + `settle_reply` for the common receipts (pure).

The status fold's per-receipt CPU went to pydantic: a validated Receipt, a validated row, frozen copies per step
and a JSON dump per change (docs/decisions/0050-status-fold-on-dicts.md). Here a receipt is the dict fastavro
decoded (the schema has checked its types: that is the validation where it enters) and a row is the JSON dict
the store holds, keys in `StatusRow`'s field order, so `orjson.dumps` of a folded row is the bytes
`StatusRow.model_dump_json` writes.

The dict path covers a request's plain life (ACCEPTED, INTENT_RESOLVED, ROUTED, STARTED, retries and the
endings) on rows with no callback, fallback, fan-out, progress, question or turns to keep: `covers` says when.
Everything else goes through the models. A row read from the store in another shape (one an older version wrote,
missing fields) is validated into this version's shape first (`current`). A hypothesis test keeps both paths equal
row for row (tests/unit/streams/test_status_rowfold.py).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from reach.core.allowance import children_of
from reach.core.lifecycle import _PHASE, _RANK, MAX_ERROR_CHARS, MAX_RESULT_CHARS, MAX_STEPS, StatusRow, Step
from reach.records import DELIVERY, ErrorInfo, Status, Usage

Row = dict[str, Any]
"""A status row as JSON (what `StatusRow.model_dump(mode="json")` gives and the store holds)."""

ROW_FIELDS = tuple(StatusRow.model_fields)
STEP_FIELDS = tuple(Step.model_fields)
ERROR_FIELDS = tuple(ErrorInfo.model_fields)
USAGE_FIELDS = tuple(Usage.model_fields)

COVERED = frozenset({Status.ACCEPTED, Status.INTENT_RESOLVED, Status.ROUTED, Status.STARTED, Status.ATTEMPT_FAILED,
                     Status.RETRY_SCHEDULED, Status.COMPLETED, Status.FAILED, Status.REJECTED, Status.UNROUTABLE,
                     Status.EXPIRED, Status.DEAD_LETTERED, Status.CANCELED})
"""The receipt statuses the dict path folds (PROGRESS, INPUT_REQUIRED, FANNED_OUT, delivery steps and UNKNOWN go
through the models)."""
_TERMINAL = frozenset(s.value for s in Status if s.is_terminal)
_COVERED = frozenset(s.value for s in COVERED)
_RANKS = {s.value: rank for s, rank in _RANK.items()}
_PHASES = {s.value: phase for s, phase in _PHASE.items()}
_TIMELINE_ONLY = frozenset({Status.UNKNOWN.value, *(s.value for s in DELIVERY)})


def shaped(row: Mapping[str, Any]) -> bool:
    """The row has this version's shape: its fields, its steps' and its errors' and usages' fields, in order."""
    if tuple(row) != ROW_FIELDS:
        return False
    for step in row["timeline"]:
        if tuple(step) != STEP_FIELDS or (step["error"] is not None and tuple(step["error"]) != ERROR_FIELDS):
            return False
    error, usage, children = row["last_error"], row["usage"], row["children_usage"]
    return ((error is None or tuple(error) == ERROR_FIELDS) and (usage is None or tuple(usage) == USAGE_FIELDS)
            and (children is None or tuple(children) == USAGE_FIELDS))


def current(row: Row | None) -> Row | None:
    """The row in this version's shape: as it is when `shaped`, else validated by `StatusRow` (a row an older version
    wrote: missing fields take their defaults) and dumped again. Raises pydantic's ValidationError for a row that is
    no StatusRow at all."""
    if row is None or shaped(row):
        return row
    return StatusRow.model_validate(row).model_dump(mode="json")


def covers(row: Mapping[str, Any] | None, receipt: Mapping[str, Any], *,
           fallback_of: Callable[[str], str | None]) -> bool:
    """Whether the dict path folds `receipt` onto `row` exactly as the models would. The caller also keeps to the
    models a receipt that names a fan-out parent or a fallback child (the router's headers)."""
    status = receipt["status"]
    if (status not in _COVERED or receipt["callback"] is not None or receipt["input"] is not None
            or receipt["progress"] is not None or receipt["fanout"] is not None):
        return False
    if status in _TERMINAL and fallback_of(receipt["capability"]) is not None:
        return False  # an ending a POLICY fallback may serve: reach.core.fallback decides
    if receipt["usage"] is not None and tuple(receipt["usage"]) != USAGE_FIELDS:
        return False
    if row is None:
        return True
    return (shaped(row) and row["callback"] is None and row["fallback"] is None and not row["fallback_pending"]
            and row["fanout"] is None and row["progress"] is None and row["input"] is None and not row["turns"]
            and row["status"] in _COVERED)


def fold(row: Row | None, receipt: Mapping[str, Any], raw: bytes, *, reply_to: str | None) -> tuple[Row, bytes | None]:
    """`lifecycle.fold` then `lifecycle.settle_reply` for a receipt and row `covers` accepts: the row after it, and
    the receipt bytes to reply with (or None). `row` is not changed (an unchanged row is returned as is)."""
    after = _fold(row, receipt)
    if reply_to and after["reply_to"] is None and receipt["generation"] == after["generation"]:
        after = {**after, "reply_to": reply_to}
    if (after["envelope_at"] is None and receipt["status"] == "ROUTED"
            and receipt["generation"] == after["generation"]):
        at = _inbox(receipt)
        if at is not None:
            after = {**after, "envelope_at": at}
    return _settle_reply(row, after, receipt, raw)


def _error(error: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if error is None:
        return None
    message = error["message"]
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "…"
    return {"kind": error["kind"], "code": error["code"], "message": message}


def _step(receipt: Mapping[str, Any]) -> dict[str, Any]:
    channel = receipt["channel"]
    return {"generation": receipt["generation"], "attempt": receipt["attempt"], "status": receipt["status"],
            "at": receipt["at"], "agent_id": receipt["agent_id"], "instance_id": receipt["instance_id"],
            "error": _error(receipt["error"]),
            "channel": None if channel is None else {"channel": channel["channel"],
                                                     "provider_message_id": channel["provider_message_id"],
                                                     "callback_id": channel["callback_id"]}}


def _order(step: Mapping[str, Any]) -> tuple[int, int, int, int]:
    return step["generation"], step["attempt"], _PHASES.get(step["status"], 2), step["at"]


def _fold(row: Row | None, receipt: Mapping[str, Any]) -> Row:
    step = _step(receipt)
    if row is None or receipt["generation"] > row["generation"]:
        return _current(receipt, [*(row["timeline"] if row else []), step], row)
    if step in row["timeline"]:
        return row
    timeline = sorted([*row["timeline"], step], key=_order)
    dropped = max(0, len(timeline) - MAX_STEPS)
    if receipt["generation"] < row["generation"] or row["status"] in _TERMINAL or not _advances(row, receipt):
        return {**row, "timeline": timeline[dropped:], "dropped_steps": row["dropped_steps"] + dropped}
    return _current(receipt, timeline, row)


def _advances(row: Mapping[str, Any], receipt: Mapping[str, Any]) -> bool:
    status = receipt["status"]
    if status in _TERMINAL:
        return True
    if status in _TIMELINE_ONLY:
        return False
    rank = _RANKS[status]
    resolution = receipt["resolution"]
    if status == "INTENT_RESOLVED" and resolution is not None and resolution["stage"] == "handoff":
        rank = _RANKS["ROUTED"]  # a handoff moves a ROUTED row on (lifecycle._rank)
    return (receipt["attempt"], rank) >= (row["attempt"], _RANKS.get(row["status"], 0))


def _inbox(receipt: Mapping[str, Any]) -> list[Any] | None:
    decision = receipt["decision"]
    if decision and decision["topic"] and decision["partition"] is not None and decision["offset"] is not None:
        return [decision["topic"], decision["partition"], decision["offset"]]
    return None


def _result_text(receipt: Mapping[str, Any]) -> tuple[str | None, bool]:
    result = receipt["result"]
    if result is None:
        return None, False
    text = result.decode("utf-8", errors="replace")
    return (text[:MAX_RESULT_CHARS], True) if len(text) > MAX_RESULT_CHARS else (text, False)


def _last_error(timeline: list[dict[str, Any]], generation: int) -> dict[str, Any] | None:
    errors = [s["error"] for s in timeline if s["generation"] == generation and s["error"] is not None]
    return errors[-1] if errors else None


def _current(receipt: Mapping[str, Any], timeline: list[dict[str, Any]], previous: Row | None) -> Row:
    """`lifecycle._current` on dicts, keys in StatusRow's field order."""
    dropped = max(0, len(timeline) - MAX_STEPS)
    timeline = timeline[dropped:]
    status, at, generation = receipt["status"], receipt["at"], receipt["generation"]
    same = previous if previous is not None and previous["generation"] == generation else None
    terminal = status in _TERMINAL
    result, truncated = _result_text(receipt) if terminal else (None, False)
    routed = status == "ROUTED"
    inbox = _inbox(receipt) if routed else None
    timeout = receipt["delivery_timeout_ms"]
    usage = receipt["usage"] if terminal else None
    children = children_of(receipt["timings"]).usage() if terminal else None
    return {
        "message_id": receipt["message_id"], "trace_id": receipt["trace_id"], "tenant": receipt["tenant"],
        "capability": receipt["capability"], "generation": generation, "status": status,
        "attempt": receipt["attempt"], "agent_id": receipt["agent_id"], "instance_id": receipt["instance_id"],
        "last_error": _error(receipt["error"]) or _last_error(timeline, generation),
        "result": result, "terminal_at": at if terminal else None, "updated_at": at,
        "deadline": receipt["deadline"] or (same["deadline"] if same else None),
        "delivery_due_at": at + timeout if routed and timeout else None,
        "inbox": inbox, "routed_instance": receipt["instance_id"] if routed else None,
        "reroutes": receipt["reroutes"], "timeline": timeline,
        "dropped_steps": (previous["dropped_steps"] if previous else 0) + dropped,
        "result_truncated": truncated,
        "reply_to": same["reply_to"] if same else None,
        "replied": same["replied"] if same else False,
        "pending_reply": same["pending_reply"] if same else None,
        "callback": None, "callback_sent": same["callback_sent"] if same else False,
        "progress": None,  # `covers`: neither the receipt nor the previous row has progress
        "envelope_at": inbox or (same["envelope_at"] if same else None),
        "fallback": None, "fallback_pending": False, "input": None,
        "turns": previous["turns"] if previous else [],
        "usage": dict(usage) if usage is not None else None,
        "fanout": None,
        "children_usage": children.model_dump(mode="json") if children is not None else None,
    }


def _settle_reply(before: Row | None, after: Row, receipt: Mapping[str, Any], raw: bytes) -> tuple[Row, bytes | None]:
    """`lifecycle.settle_reply` on dicts (no INPUT_REQUIRED here: a row answers when it is terminal)."""
    if after["replied"] or receipt["generation"] != after["generation"]:
        return after, None
    answers = after["status"] in _TERMINAL
    newly = answers and (before is None or before["status"] not in _TERMINAL
                         or before["generation"] != after["generation"])
    if newly:
        if after["reply_to"]:
            return {**after, "replied": True, "pending_reply": None}, raw
        if receipt["instance_id"] is not None and not _routed_seen(after, receipt["generation"]):
            return {**after, "pending_reply": base64.b64encode(raw).decode()}, None
        return after, None
    if after["pending_reply"] is not None:
        if after["reply_to"]:
            return {**after, "replied": True, "pending_reply": None}, base64.b64decode(after["pending_reply"])
        if receipt["status"] == "ROUTED":
            return {**after, "pending_reply": None}, None
    return after, None


def _routed_seen(row: Mapping[str, Any], generation: int) -> bool:
    return any(s["status"] == "ROUTED" and s["generation"] == generation for s in row["timeline"])
