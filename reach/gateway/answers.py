"""How an invoke ends, as an HTTP status and an InvokeAnswer (from a terminal receipt or a status row), or stops at
the question of a multi-turn message (INPUT_REQUIRED: 202, the question in `message`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from reach.gateway.bodies import ChainStep, InvokeAnswer, ReceiptError
from reach.invoke import result_value
from reach.records import Receipt, Status

_HTTP = {Status.COMPLETED: 200, Status.REJECTED: 422, Status.UNROUTABLE: 404, Status.EXPIRED: 504,
         Status.CANCELED: 409, Status.INPUT_REQUIRED: 202}
_TEXT = {
    Status.REJECTED: ("rejected", "fix the request; retrying it as is fails the same way"),
    Status.UNROUTABLE: ("unroutable", "no instance serves it; set expire_at to park it until one does"),
    Status.EXPIRED: ("expired", "the budget ran out; raise budget_ms or timeout_ms"),
    Status.FAILED: ("failed", "the agent failed it; see receipt_error"),
    Status.DEAD_LETTERED: ("dead_lettered", "it is in the dead-letter topic (`reach dlq ls`)"),
    Status.CANCELED: ("canceled", "it was cancelled before an agent started it; send it again to run it"),
    Status.INPUT_REQUIRED: ("input_required", "answer it: POST /v1/messages/{id}:input with {\"message_id\", "
                            "\"answer\"} (the status row's input.answer_schema says what the answer must be)"),
}


def http_status(status: Status, error_kind: str | None) -> int:
    if status is Status.DEAD_LETTERED and error_kind == "NO_ROUTE":
        return 404
    return _HTTP.get(status, 502)


def _answer(*, message_id: str, trace_id: str, status: Status, result: Any, error: ReceiptError | None,
            agent_id: str | None, instance_id: str | None, question: str | None = None) -> tuple[int, InvokeAnswer]:
    if status is Status.COMPLETED:
        error = None  # a row keeps the last attempt's error after a retry succeeded
    code = http_status(status, error.kind if error else None)
    fields: dict[str, Any] = {}
    if status is not Status.COMPLETED:
        name, hint = _TEXT.get(status, ("failed", "see receipt_error"))
        detail = f": {error.kind}/{error.code}: {error.message}" if error else ""
        fields = {"error": name, "message": f"{message_id} ended {status.value}{detail}", "hint": hint}
        if status is Status.INPUT_REQUIRED:  # not an ending: the turn's question, which the caller answers
            fields["message"] = f"{message_id} asks: {question or ''}"
    return code, InvokeAnswer(message_id=message_id, trace_id=trace_id, status=status.value, result=result,
                              receipt_error=error, agent_id=agent_id, instance_id=instance_id, **fields)


def from_receipt(receipt: Receipt) -> tuple[int, InvokeAnswer]:
    value = result_value(receipt)
    result = value if not isinstance(value, bytes) else value.decode(errors="replace")
    error = ReceiptError(**receipt.error.model_dump()) if receipt.error else None
    return _answer(message_id=receipt.message_id, trace_id=receipt.trace_id, status=receipt.status, result=result,
                   error=error, agent_id=receipt.agent_id, instance_id=receipt.instance_id,
                   question=receipt.input.question if receipt.input else None)


def from_endings(endings: Sequence[Receipt]) -> tuple[int, InvokeAnswer]:
    """The answer of a request's fallback chain (reach.invoke.Followed.endings): the final ending's status and
    result under the request's own message_id, and `chain` naming each ending when a fallback served it."""
    code, answer = from_receipt(endings[-1])
    if len(endings) < 2:
        return code, answer
    chain = [ChainStep(message_id=r.message_id, capability=r.capability, status=r.status.value) for r in endings]
    return code, answer.model_copy(update={"message_id": endings[0].message_id, "chain": chain})


def from_row(row: dict[str, Any]) -> tuple[int, InvokeAnswer]:
    """A terminal status row (the answer to a repeated idempotency_key, whose reply went elsewhere)."""
    text = row.get("result")
    try:
        result = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        result = text
    raw_error = row.get("last_error")
    error = ReceiptError(**raw_error) if isinstance(raw_error, dict) else None
    return _answer(message_id=row["message_id"], trace_id=row.get("trace_id", ""), status=Status(row["status"]),
                   result=result, error=error, agent_id=row.get("agent_id"), instance_id=row.get("instance_id"),
                   question=(row.get("input") or {}).get("question"))


def timed_out(message_id: str, trace_id: str, waited_ms: int) -> tuple[int, InvokeAnswer]:
    return 504, InvokeAnswer(message_id=message_id, trace_id=trace_id, status="PENDING", error="timeout",
                             message=f"no terminal receipt for {message_id} within {waited_ms} ms; it may still "
                             "finish", hint=f"GET /v1/messages/{message_id} shows where it is")
