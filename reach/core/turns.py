"""Multi-turn messages (pure): a handler's question, the caller's answer, and the next turn it starts.

A handler ends a turn with `NeedsInput(question, schema)`: the message goes to INPUT_REQUIRED (never terminal;
no delivery or execution clock runs, the budget's deadline does). The caller answers the same message; the
answer is checked here against the question's JSON Schema and against the row (waiting, same tenant, deadline
not passed), then the next turn is the asking turn's envelope again as the **next generation**
(decisions/0036): a new lease, result cache and first-terminal slot, so one terminal per (message_id,
generation) holds as before, and the whole conversation travels in the envelope's `headers` map under
`TURNS_HEADER`, bounded to the last `MAX_TURNS` turns and `MAX_CONVERSATION_BYTES` (oldest dropped, counted).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import exceptions as jsonschema_errors

from reach.core import patterns, words
from reach.errors import ReachError
from reach.records import Envelope, InputRequest, Receipt, Status

TURNS_HEADER = "reach-turns"  # Envelope.headers: the conversation so far (JSON), what ctx.turns reads
DROPPED_HEADER = "reach-turns-dropped"  # how many older turns were dropped to keep the bounds
PREFER_HEADER = "reach-prefer-instance"  # the instance that asked: the router's affinity prefers it for the next turn
MAX_QUESTION_CHARS = 2_048
MAX_SCHEMA_BYTES = 16 * 1024
MAX_ANSWER_BYTES = 32 * 1024
MAX_TURNS = 16
MAX_CONVERSATION_BYTES = 64 * 1024
KIND = "x-reach-kind"  # an annotation of the answer's schema: "auth" when the question asks for authorization
AUTH = "auth"
INPUT = "input"


class BadQuestion(ReachError, ValueError):
    """A handler's NeedsInput was given something that cannot be asked (raised in the handler, which decides)."""


class AnswerRefused(ReachError):
    """An answer that cannot continue the message: `status` is the HTTP status the gateway answers with, `code`
    its `error`, and the message says what happened and what to do."""

    def __init__(self, status: int, code: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint


@dataclass(frozen=True, slots=True)
class Question:
    """What a handler asks: checked when it is made (NeedsInput)."""

    question: str
    schema_text: str  # canonical JSON of the answer's JSON Schema


@dataclass(frozen=True, slots=True)
class Turn:
    """One finished turn of the conversation: the question asked, the schema of its answer, the answer."""

    turn: int
    question: str
    schema: Any
    answer: Any


def question_of(question: Any, schema: Any = None, *, kind: str = INPUT) -> Question:
    """A checked question: non-empty text of at most 2,048 characters, and a valid JSON Schema (a dict or a
    boolean; None accepts any JSON answer) of at most 16 KiB. BadQuestion names what is wrong. A question of `kind`
    AUTH (NeedsAuth: the caller must authorize something before the handler goes on) says so in its schema, as the
    annotation `"x-reach-kind": "auth"` (validators ignore it; the row and the receipts carry it unchanged, so the
    kind needs no record field: decisions/0047)."""
    if kind == AUTH:
        if schema is False:
            raise BadQuestion("NeedsAuth's schema is false: no answer could ever authorize it.")
        schema = {KIND: AUTH} if schema is None or schema is True else (
            {**schema, KIND: AUTH} if isinstance(schema, dict) else schema)
    if not isinstance(question, str) or not question.strip():
        raise BadQuestion(f"NeedsInput takes a question as non-empty text; got {question!r:.100}.")
    if len(question) > MAX_QUESTION_CHARS:
        raise BadQuestion(f"NeedsInput's question has {len(question)} characters; at most {MAX_QUESTION_CHARS}.")
    schema = {} if schema is None else schema
    if not isinstance(schema, (dict, bool)):
        raise BadQuestion(f"NeedsInput's schema must be a JSON Schema (a dict or a boolean); got "
                          f"{type(schema).__name__}.")
    try:
        patterns.check_schema(schema)  # a pattern RE2 cannot run is refused here (reach/core/patterns.py)
        text = json.dumps(schema, separators=(",", ":"), sort_keys=True)
    except jsonschema_errors.SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise BadQuestion(f"NeedsInput's schema is not a valid JSON Schema at {path}: {exc.message}.") from None
    except (TypeError, ValueError) as exc:
        raise BadQuestion(f"NeedsInput's schema is not JSON: {exc}.") from None
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise BadQuestion(f"NeedsInput's schema takes {len(text.encode())} bytes; at most {MAX_SCHEMA_BYTES}.")
    return Question(question, text)


def kind_of(schema_text: str | None) -> str:
    """AUTH when the question's schema (JSON text) says it asks for authorization, else INPUT."""
    if not schema_text or KIND not in schema_text:
        return INPUT
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return INPUT
    return AUTH if isinstance(schema, dict) and schema.get(KIND) == AUTH else INPUT


def answer_problem(schema_text: str, answer: Any) -> str | None:
    """Why `answer` does not satisfy the question's schema (JSON text), or None when it does."""
    try:
        schema = json.loads(schema_text or "{}")
        error = next(iter(patterns.validator(schema).iter_errors(answer)), None)
    except (ValueError, TypeError, jsonschema_errors.SchemaError, RecursionError, patterns.PatternError) as exc:
        return f"could not be checked against the question's schema ({type(exc).__name__})"
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"at {path}: {error.message}"[:1000]


def conversation(headers: Mapping[str, str]) -> tuple[Turn, ...]:
    """The turns an envelope carries (oldest first); () for a first turn or a header that does not read."""
    text = headers.get(TURNS_HEADER)
    if not text:
        return ()
    try:
        items = json.loads(text)
        return tuple(Turn(int(t["turn"]), str(t["question"]), t.get("schema", {}), t.get("answer"))
                     for t in items)
    except (ValueError, TypeError, KeyError, RecursionError):
        return ()


def dropped_turns(headers: Mapping[str, str]) -> int:
    try:
        return max(0, int(headers.get(DROPPED_HEADER, "0")))
    except ValueError:
        return 0


def with_turn(headers: Mapping[str, str], turn: Turn) -> dict[str, str]:
    """The envelope headers with `turn` appended to the conversation, within the bounds (oldest turns dropped
    first and counted under DROPPED_HEADER; the newest turn is always kept)."""
    turns = [*conversation(headers), turn][-MAX_TURNS:]
    dropped = dropped_turns(headers) + len(conversation(headers)) + 1 - len(turns)
    while True:
        text = json.dumps([{"turn": t.turn, "question": t.question, "schema": t.schema, "answer": t.answer}
                           for t in turns], separators=(",", ":"))
        if len(text.encode()) <= MAX_CONVERSATION_BYTES or len(turns) == 1:
            break
        turns, dropped = turns[1:], dropped + 1
    out = {**headers, TURNS_HEADER: text}
    if dropped:
        out[DROPPED_HEADER] = str(dropped)
    return out


def refusal(row: Mapping[str, Any], *, tenant: str | None, now_ms: int) -> AnswerRefused | None:
    """Why the message in `row` (the status table's row, as JSON) cannot take an answer now, or None.

    `tenant` None is an operator (`reach answer`): any tenant. Another tenant's message reads as absent (404, as
    every read of the gateway answers it: a 403 would tell the caller the id exists); a message that is not
    waiting for an answer is 409; one past its deadline 410."""
    message_id = row.get("message_id")
    if tenant is not None and row.get("tenant") != tenant:
        return AnswerRefused(404, "not_found", f"no message {message_id!r} in the status table",
                             "check the id the send returned")
    deadline = row.get("deadline")
    if deadline is not None and now_ms >= int(deadline):
        return AnswerRefused(410, "expired", f"{message_id}'s budget ended at {deadline}; it can no longer take an "
                             "answer", "send the request again, with a longer budget_ms if people answer")
    if row.get("status") != Status.INPUT_REQUIRED.value or not row.get("input"):
        return AnswerRefused(409, "not_waiting", f"{message_id} is {row.get('status')}, not waiting for an answer "
                             "(INPUT_REQUIRED)", "read the message's status; answer only a question it asks")
    return None


def checked_answer(row: Mapping[str, Any], answer: Any) -> InputRequest:
    """The row's question with `answer` (400 `invalid_answer` when it breaks the question's schema or is too
    large): what the next turn's ACCEPTED receipt carries."""
    asked = InputRequest.model_validate(row["input"])
    try:
        text = json.dumps(answer, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise AnswerRefused(400, "invalid_answer", f"the answer is not one JSON document: {exc}") from None
    if len(text.encode()) > MAX_ANSWER_BYTES:
        raise AnswerRefused(413, "answer_too_large", f"the answer takes {len(text.encode())} bytes; at most "
                            f"{MAX_ANSWER_BYTES}", "answer with less, or a reference to it")
    problem = answer_problem(asked.answer_schema, answer)
    if problem is not None and isinstance(answer, str):  # words: the text fills the schema, or is its JSON
        schema = _schema(asked.answer_schema)
        taken = next((v for v in words.readings(schema, answer)[1:]
                      if answer_problem(asked.answer_schema, v) is None), _NONE)
        if taken is not _NONE:
            return asked.model_copy(update={"answer": json.dumps(taken, separators=(",", ":"))})
        problem = (f"(a text answer fits only a schema asking for a string or for one string property, or as JSON "
                   f"the schema accepts; {problem})")
    if problem is not None:
        raise AnswerRefused(400, "invalid_answer", f"the answer does not satisfy the question's schema {problem}",
                            f"send JSON like {words.example_text(_schema(asked.answer_schema))} (the question: "
                            f"{asked.question!r}; its schema: {asked.answer_schema})")
    return asked.model_copy(update={"answer": text})


_NONE = object()


def _schema(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {}


def next_turn(asking: Envelope, answered: InputRequest, *, agent_id: str | None, now_ms: int,
              instance_id: str | None = None, reply_to: str | None = None) -> tuple[Envelope, Receipt]:
    """The next turn: the asking turn's envelope as the next generation (attempt 1, nothing excluded, the same
    agent; its lease and result are those of the new generation, and a business idempotency_key stays its own:
    the key's run is held by this message_id, which may go on), the conversation with this answer in its headers;
    and the ACCEPTED receipt that records the answer on the status row. Session affinity: the envelope names the
    instance that asked (PREFER_HEADER) under a session key (the conversation's, else the message id), which the
    router's affinity factor prefers while that instance is a candidate; another instance of the agent takes the
    turn otherwise (the conversation travels with the envelope, not in the instance)."""
    turn = Turn(answered.turn, answered.question, json.loads(answered.answer_schema or "{}"),
                json.loads(answered.answer or "null"))
    headers = with_turn(asking.headers, turn)
    if instance_id:
        headers[PREFER_HEADER] = instance_id
    routing = asking.routing.model_copy(update={"session_key": asking.routing.session_key or asking.message_id})
    envelope = asking.model_copy(update={
        "generation": asking.generation + 1, "attempt": 1, "reroutes": 0, "excluded_instances": [],
        "to_agent": agent_id or asking.to_agent, "routing": routing, "headers": headers,
        "reply_to": reply_to or asking.reply_to,
    })
    receipt = Receipt(message_id=envelope.message_id, generation=envelope.generation, trace_id=envelope.trace_id,
                      tenant=envelope.tenant, capability=envelope.capability, status=Status.ACCEPTED, attempt=1,
                      at=now_ms, deadline=envelope.deadline, delivery_timeout_ms=envelope.delivery_timeout_ms,
                      callback=envelope.callback,
                      input=answered.model_copy(update={"origin_topic": None, "origin_partition": None,
                                                        "origin_offset": None}))
    return envelope, receipt
