"""The Multi Round-Trip Request pattern of MCP 2026-07-28 for a capability that asks (pure): INPUT_REQUIRED as an
InputRequiredResult with one form elicitation (the question, its answer's schema), and the client's retry read back
into the answer that continues the message (reach.ops.turns, as `POST /v1/messages/{id}:input`).

The `requestState` is `reach-input:o:<message id>` (`w` instead of `o` when the question's schema was wrapped): it
names the message and how to read the answer, nothing else. The spec asks a server to treat
the echoed state as the caller's input: it is parsed here, and the answer is taken only for a message of the calling
app's tenant that waits for one (the turn store's checks), so a forged state can answer nothing another app asked.
Not sealed: any replica can take the retry, as the bus can."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from reach.errors import ReachError
from reach.mcp.ports import Ended

STATE_PREFIX = "reach-input:"
KEY = "answer"  # the one input request's key
WRAPPED = "answer"  # the property a non-object question schema is wrapped in (form elicitation asks objects)
MAX_STATE = 300


class BadRound(ReachError):
    """A retry whose requestState or inputResponses cannot be read (invalid params)."""


def input_required(ended: Ended) -> types.InputRequiredResult:
    """The question of an INPUT_REQUIRED message as one form elicitation; its schema as asked when it is an object,
    else wrapped as `{"answer": <schema>}` (unwrapped again by `answer_of`)."""
    schema = schema_of(ended.answer_schema)
    whole = is_object(schema)
    asked = types.ElicitRequest(params=types.ElicitRequestFormParams(
        message=ended.question or "", requested_schema=schema if whole else _wrap(schema)))
    state = f"{STATE_PREFIX}{'o' if whole else 'w'}:{ended.message_id}"
    return types.InputRequiredResult(input_requests={KEY: asked}, request_state=state)


def asked(state: str) -> tuple[str, bool]:
    """The message id a retry's requestState names and whether its answer is wrapped; BadRound when it is not one
    this server minted."""
    form, _, message_id = state[len(STATE_PREFIX):].partition(":")
    if len(state) > MAX_STATE or not state.startswith(STATE_PREFIX) or form not in ("o", "w") or not message_id:
        raise BadRound("requestState is not one this server sent: retry the call with the requestState of its "
                       "InputRequiredResult, unchanged")
    return message_id, form == "w"


def answer_of(responses: types.InputResponses | None, *, wrapped: bool) -> Any:
    """The answer in a retry's inputResponses (the accepted elicitation's content, unwrapped when the question's
    schema was); BadRound when it is missing, declined or cancelled."""
    found = (responses or {}).get(KEY)
    if not isinstance(found, types.ElicitResult):
        raise BadRound(f"inputResponses[{KEY!r}] is missing or not an elicitation result: answer the question the "
                       "InputRequiredResult asked")
    if found.action != "accept" or found.content is None:
        said = {"decline": "declined", "cancel": "cancelled"}.get(found.action, found.action)
        raise BadRound(f"the question was {said}: the message still waits; answer it to go on, or cancel the call")
    content = dict(found.content)
    if wrapped and WRAPPED not in content:
        raise BadRound(f"the answer must be under {WRAPPED!r}, as the elicitation's schema asks")
    return content[WRAPPED] if wrapped else content


def schema_of(text: str | None) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {}


def is_object(schema: Any) -> bool:
    return isinstance(schema, dict) and (schema.get("type") == "object" or "properties" in schema)


def _wrap(schema: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {WRAPPED: schema if isinstance(schema, dict) else {}},
            "required": [WRAPPED]}
