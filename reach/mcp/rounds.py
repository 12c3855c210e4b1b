"""The Multi Round-Trip Request pattern of MCP 2026-07-28 for a capability that asks (pure): INPUT_REQUIRED as an
InputRequiredResult with one form elicitation (the question, its answer's schema), and the client's retry read back
into the answer that continues the message (reach.ops.turns, as `POST /v1/messages/{id}:input`).

The `requestState` is `reach-input:o:<message id>` (`w` instead of `o` when the question's schema was wrapped),
sealed for the calling app (`seal`: the box task ids are sealed with, under its own purpose SEALED_AS): it names the
message and how to read the answer, nothing else. The spec asks a server to treat the echoed state as the caller's
input: a state that does not open for the retrying app (another app's, even of the same tenant; forged; mangled) is
refused as one this server never sent, and the answer is taken only for a message of the app's tenant that waits for
one (the turn store's checks). Any replica sharing the gateway's secrets key opens it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import mcp_types as types

from reach.errors import ReachError
from reach.mcp.ports import Ended

if TYPE_CHECKING:
    from reach.mcp.tasks import Sealer

SEALED_AS = "mcp-round"  # the key id the sealer binds a requestState to (beside the app id)
MAX_SEALED_STATE = 1024
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


def sealed(required: types.InputRequiredResult, sealer: Sealer, app_id: str) -> types.InputRequiredResult:
    """`required` with its requestState sealed for the app that is asked."""
    state = sealer.seal(app_id, SEALED_AS, (required.request_state or "").encode()).decode()
    return required.model_copy(update={"request_state": state})


def asked(state: str, sealer: Sealer | None = None, app_id: str = "") -> tuple[str, bool]:
    """The message id a retry's requestState names and whether its answer is wrapped (opened for `app_id` first
    when `sealer` is given); BadRound when it is not one this server minted for this app."""
    if sealer is not None:
        try:
            if len(state) > MAX_SEALED_STATE:
                raise ValueError("too long")
            state = sealer.open(app_id, SEALED_AS, state.encode()).decode()
        except Exception:  # noqa: BLE001 - any failure to open is "not a state this server sent this app"
            state = ""
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
