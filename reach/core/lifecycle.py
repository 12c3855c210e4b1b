"""The status table's row and its pure transition function (receipts fold into one row per message).

Rows are bounded: at most `MAX_STEPS` timeline steps (older ones are dropped and counted), results
cut at `MAX_RESULT_CHARS` and error messages at `MAX_ERROR_CHARS`, and the partial results of PROGRESS
receipts kept within `reach.core.progress.MAX_ROW_CHUNKS` / `MAX_ROW_CHUNK_CHARS`, so one chatty message
or a huge result cannot make a row, the store or the changelog grow without limit.

A PROGRESS receipt never enters the timeline and never changes the row's status: it only updates
`progress` (the last fraction and note, the chunks of the current attempt), and only while the row is
not terminal and the receipt is of its generation.

INPUT_REQUIRED (a handler's NeedsInput) is a turn's outcome, never terminal: the row keeps the question (`input`)
until the answer starts the next generation, and the answered questions (`turns`) across generations.

A run that ended within the agent's short grace has no STARTED receipt: its outcome carries the start in its
timings (`STARTED_AT`, epoch ms), and the fold puts that STARTED step in the timeline, so the row reads
routed -> started -> outcome and its run time is measured from it as from a STARTED receipt.

One implementation, on plain dicts (docs/decisions/0050-status-fold-on-dicts.md, 0055): a receipt is the dict
fastavro decoded (or `Receipt.model_dump()`), a row the JSON dict the store holds, keys in `StatusRow`'s field
order, so `orjson.dumps` of a folded row is the bytes `StatusRow.model_dump_json` writes. `apply` is what the
status fold runs per receipt; `fold` and `settle_reply` are the same steps for callers that hold the models.
A row read from the store in another shape (one an older version wrote) is validated into this version's first
(`current`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from reach.core.allowance import children_of
from reach.core.fanout import FanOutRow, track
from reach.core.progress import Chunks, fold_progress
from reach.core.turns import AUTH, kind_of
from reach.records import DELIVERY, ChannelDelivery, ErrorInfo, InputRequest, Progress, Receipt, Status, Usage

# Within one attempt, a later step never moves the row back (ROUTED can arrive after STARTED:
# the router writes its receipt after the forward is acked, the agent may start before that).
_RANK = {
    Status.ACCEPTED: 0,
    Status.INTENT_RESOLVED: 0,  # the resolver's step before the router's (docs/intent.md)
    Status.ROUTED: 1,
    Status.STARTED: 2,
    Status.ATTEMPT_FAILED: 3,
    Status.RETRY_SCHEDULED: 4,
    Status.INPUT_REQUIRED: 3,  # a turn's outcome (NeedsInput): the row waits for the answer, the next generation
    Status.FANNED_OUT: 1,  # a fan-out parent: its deliveries run as children (reach.core.fanout)
}
# Timeline order: generation, attempt, then phase, then time. The router stamps a ROUTED receipt when the
# forward's delivery report runs, which can be after the agent already finished it; by phase the
# timeline still reads routed -> started -> outcome (a reroute's ACCEPTED and ROUTED stay in time order).
_PHASE = {Status.ACCEPTED: 0, Status.INTENT_RESOLVED: 0, Status.ROUTED: 0, Status.STARTED: 1, Status.FANNED_OUT: 0}
MAX_STEPS = 64
MAX_RESULT_CHARS = 64 * 1024
MAX_ERROR_CHARS = 2_048
MAX_ROW_TURNS = 16
MAX_ANSWER_CHARS = 4_096


class Step(BaseModel):
    """One transition in the message's timeline."""

    model_config = ConfigDict(frozen=True)

    generation: int
    attempt: int
    status: Status
    at: int
    agent_id: str | None = None
    instance_id: str | None = None
    error: ErrorInfo | None = None
    channel: ChannelDelivery | None = None  # on a delivery step (SENT, DELIVERED, READ, CALLBACKED)


class FallbackRef(BaseModel):
    """The fallback that serves a message (reach.core.fallback): its capability and child message id, or why no
    child was sent (`note`, message_id None)."""

    model_config = ConfigDict(frozen=True)

    capability: str
    message_id: str | None = None
    note: str | None = None


class AnsweredTurn(BaseModel):
    """One answered question of a multi-turn message, as the row keeps it (the answer cut at MAX_ANSWER_CHARS)."""

    model_config = ConfigDict(frozen=True)

    turn: int
    generation: int  # the generation the answer started
    question: str
    answer: str
    at: int
    auth: bool = False  # the question asked for authorization (NeedsAuth): A2A's history shows it auth-required


class StatusRow(BaseModel):
    """Where one message is: current generation and status, who has it, and every step so far."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    trace_id: str
    tenant: str
    capability: str
    generation: int
    status: Status
    attempt: int
    agent_id: str | None = None
    instance_id: str | None = None
    last_error: ErrorInfo | None = None
    result: str | None = None  # the result as text (JSON) when the terminal receipt carried one
    terminal_at: int | None = None
    updated_at: int
    deadline: int | None = None  # the envelope's total budget end, for the timekeeper
    delivery_due_at: int | None = None  # ROUTED and not STARTED by then: the timekeeper reroutes
    inbox: tuple[str, int, int] | None = None  # where the last ROUTED forwarded the envelope
    routed_instance: str | None = None
    reroutes: int = 0
    timeline: list[Step] = []
    dropped_steps: int = 0  # oldest steps dropped to keep the timeline at MAX_STEPS
    result_truncated: bool = False
    reply_to: str | None = None  # the envelope's reply_to, learned from the router's receipts
    replied: bool = False  # the current generation's first terminal receipt went to reply_to
    pending_reply: str | None = None  # base64 terminal receipt that arrived before its reply_to was known
    callback: str | None = None  # the envelope's callback spec, learned from receipts written from the envelope
    callback_sent: bool = False  # the current generation's callback envelope (or its rejection) was produced
    progress: Chunks | None = None  # the handler's last progress and partial results (PROGRESS receipts, v7)
    envelope_at: tuple[str, int, int] | None = None  # the generation's last forward (an inbox record), kept after it
    fallback: FallbackRef | None = None  # the child its capability's fallback sent for this generation's ending
    fallback_pending: bool = False  # an agent's ending to send to the fallback once a ROUTED says where the envelope is
    input: InputRequest | None = None  # while INPUT_REQUIRED: the question, its answer's schema, the asking envelope
    turns: list[AnsweredTurn] = []  # the questions answered so far (the last MAX_ROW_TURNS), across generations
    usage: Usage | None = None  # what the run that ended the generation cost (its terminal receipt's, v9)
    fanout: FanOutRow | None = None  # a fan-out parent's deliveries, or a delivery's parent (reach.core.fanout, v10)
    children_usage: Usage | None = None  # what the children that run waited for spent, summed (0043)

    @property
    def terminal(self) -> bool:
        return self.status.is_terminal


Row = dict[str, Any]
"""A status row as JSON (what `StatusRow.model_dump(mode="json")` gives and the store holds)."""

STARTED_AT = "started_at"
"""The timings key of an outcome whose run skipped its STARTED receipt: when the run started (epoch ms)."""
ROW_FIELDS = tuple(StatusRow.model_fields)
STEP_FIELDS = tuple(Step.model_fields)
ERROR_FIELDS = tuple(ErrorInfo.model_fields)
USAGE_FIELDS = tuple(Usage.model_fields)
_TERMINAL = frozenset(s.value for s in Status if s.is_terminal)
_RANKS = {s.value: rank for s, rank in _RANK.items()}
_PHASES = {s.value: phase for s, phase in _PHASE.items()}
_TIMELINE_ONLY = frozenset({Status.UNKNOWN.value, *(s.value for s in DELIVERY)})
_RAN = frozenset({*_TERMINAL, Status.ATTEMPT_FAILED.value, Status.INPUT_REQUIRED.value})
"""The outcomes of a run: those may carry STARTED_AT in place of a STARTED receipt."""


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


def apply(row: Row | None, receipt: Mapping[str, Any], raw: bytes, *, reply_to: str | None = None) -> tuple[
        Row, bytes | None]:
    """`step` then `settle`: the row after one receipt, and the receipt bytes to reply with (or None). `row` is not
    changed; an unchanged row is returned as it is."""
    return settle(row, step(row, receipt, reply_to=reply_to), receipt, raw)


def step(row: Row | None, receipt: Mapping[str, Any], *, reply_to: str | None = None) -> Row:
    """Apply one receipt. First terminal per (message_id, generation) wins; later ones only extend the
    timeline; an exact duplicate changes nothing; a newer generation (a replay) reopens the row.
    `reply_to` is the envelope's reply topic when the receipt's writer knew it (the router does)."""
    status, generation = receipt["status"], receipt["generation"]
    if status == "PROGRESS":
        return _progress(row, receipt)
    after = _fold(row, receipt)
    if status == "FANNED_OUT" and receipt["fanout"] is not None and generation == after["generation"]:
        book = track(None if after["fanout"] is None else FanOutRow.model_validate(after["fanout"]), receipt)
        after = {**after, "fanout": book.model_dump(mode="json")}
    if reply_to and after["reply_to"] is None and generation == after["generation"]:
        after = {**after, "reply_to": reply_to}
    if receipt["callback"] and after["callback"] is None and generation == after["generation"]:
        after = {**after, "callback": receipt["callback"]}
    if after["envelope_at"] is None and status == "ROUTED" and generation == after["generation"]:
        at = _inbox(receipt)  # a ROUTED folded after the agent's ending: the fallback still needs the envelope
        if at is not None:
            after = {**after, "envelope_at": at}
    answered = receipt["input"]
    if answered is not None and answered["answer"] is not None:
        after = _answered(after, receipt, answered)
    return after


def _error(error: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if error is None:
        return None
    message = error["message"]
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "…"
    return {"kind": error["kind"], "code": error["code"], "message": message}


def _step(receipt: Mapping[str, Any], status: str | None = None, at: int | None = None) -> dict[str, Any]:
    channel = receipt["channel"]
    return {"generation": receipt["generation"], "attempt": receipt["attempt"], "status": status or receipt["status"],
            "at": receipt["at"] if at is None else at, "agent_id": receipt["agent_id"],
            "instance_id": receipt["instance_id"], "error": None if status else _error(receipt["error"]),
            "channel": None if channel is None or status else {
                "channel": channel["channel"], "provider_message_id": channel["provider_message_id"],
                "callback_id": channel["callback_id"]}}


def _started(row: Row | None, receipt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The STARTED step an outcome stands for when its run skipped the STARTED receipt (none when the row has one
    for its attempt, or the receipt carries no STARTED_AT)."""
    at = receipt["timings"].get(STARTED_AT) if receipt["status"] in _RAN else None
    if at is None:
        return []
    generation, attempt = receipt["generation"], receipt["attempt"]
    if row is not None and any(s["status"] == "STARTED" and s["generation"] == generation and s["attempt"] == attempt
                               for s in row["timeline"]):
        return []
    return [_step(receipt, "STARTED", at)]


def _order(step: Mapping[str, Any]) -> tuple[int, int, int, int]:
    return step["generation"], step["attempt"], _PHASES.get(step["status"], 2), step["at"]


def _fold(row: Row | None, receipt: Mapping[str, Any]) -> Row:
    step = _step(receipt)
    if row is None or receipt["generation"] > row["generation"]:
        return _current(receipt, [*(row["timeline"] if row else []), *_started(None, receipt), step], row)
    if step in row["timeline"]:
        return row
    timeline = sorted([*row["timeline"], *_started(row, receipt), step], key=_order)
    dropped = max(0, len(timeline) - MAX_STEPS)
    if receipt["generation"] < row["generation"] or row["status"] in _TERMINAL or not _advances(row, receipt):
        return {**row, "timeline": timeline[dropped:], "dropped_steps": row["dropped_steps"] + dropped}
    return _current(receipt, timeline, row)


def _advances(row: Mapping[str, Any], receipt: Mapping[str, Any]) -> bool:
    status = receipt["status"]
    if status in _TERMINAL:
        return True
    if status in _TIMELINE_ONLY:
        return False  # a newer writer's step or a channel's delivery step: timeline only, the row keeps its status
    if status == "FANNED_OUT" and row["status"] == "FANNED_OUT":
        return False  # a delivery's ending (or the router's step read again): the parent's timeline only
    rank = _RANKS[status]
    resolution = receipt["resolution"]
    if status == "INTENT_RESOLVED" and resolution is not None and resolution["stage"] == "handoff":
        # a handoff (the router found no instance, a human now holds it) moves a ROUTED row on: a delivery timeout
        # no longer applies, so the timekeeper does not reroute it again (and reopen its handoff)
        rank = _RANKS["ROUTED"]
    return (receipt["attempt"], rank) >= (row["attempt"], _RANKS.get(row["status"], 0))


def _inbox(receipt: Mapping[str, Any]) -> list[Any] | None:
    decision = receipt["decision"]
    if decision and decision["topic"] and decision["partition"] is not None and decision["offset"] is not None:
        return [decision["topic"], decision["partition"], decision["offset"]]
    return None


def _answered(row: Row, receipt: Mapping[str, Any], answered: Mapping[str, Any]) -> Row:
    """The answer an ACCEPTED receipt of a next turn carries joins the row's turns (once per turn)."""
    if any(t["turn"] == answered["turn"] for t in row["turns"]):
        return row
    turn = AnsweredTurn(turn=answered["turn"], generation=receipt["generation"], question=answered["question"],
                        answer=(answered["answer"] or "")[:MAX_ANSWER_CHARS], at=receipt["at"],
                        auth=kind_of(answered["answer_schema"]) == AUTH).model_dump(mode="json")
    turns = sorted([*row["turns"], turn], key=lambda t: t["turn"])[-MAX_ROW_TURNS:]
    return {**row, "turns": turns}


def _progress(row: Row | None, receipt: Mapping[str, Any]) -> Row:
    """PROGRESS updates the row's progress only. It says a handler runs: a row not seen yet, or an older
    generation, reads it as STARTED (the agent publishes STARTED first, on the same partition, so only a lost
    row or a reordered replay gets here); an ended row or an older generation's PROGRESS is kept as it is."""
    if row is None or receipt["generation"] > row["generation"]:
        row = _current({**receipt, "status": "STARTED", "progress": None}, list(row["timeline"]) if row else [], row)
    progress = receipt["progress"]
    if progress is None or row["status"] in _TERMINAL or receipt["generation"] != row["generation"]:
        return row
    chunks = None if row["progress"] is None else Chunks.model_validate(row["progress"])
    folded = fold_progress(chunks, receipt["attempt"], Progress.model_validate(progress), receipt["at"])
    return {**row, "progress": folded.model_dump(mode="json")}


def _result_text(receipt: Mapping[str, Any]) -> tuple[str | None, bool]:
    result = receipt["result"]
    if result is None:
        return None, False
    text = result.decode("utf-8", errors="replace")
    return (text[:MAX_RESULT_CHARS], True) if len(text) > MAX_RESULT_CHARS else (text, False)


def _last_error(timeline: list[dict[str, Any]], generation: int) -> dict[str, Any] | None:
    errors = [s["error"] for s in timeline if s["generation"] == generation and s["error"] is not None]
    return errors[-1] if errors else None


def _fanout(previous: Row | None, same: bool) -> dict[str, Any] | None:
    """What a row's fan-out keeps when its current receipt changes: all of it within a generation; across
    generations only a delivery's parent (a replayed delivery still reports to it)."""
    book = previous["fanout"] if previous is not None else None
    if book is None or same:
        return book
    return FanOutRow(of=book["of"]).model_dump(mode="json") if book["of"] else None


def _current(receipt: Mapping[str, Any], timeline: list[dict[str, Any]], previous: Row | None) -> Row:
    """The row with `receipt` as its current status (keys in StatusRow's field order); reply bookkeeping carries over
    within a generation."""
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
    asked = receipt["input"] if status == "INPUT_REQUIRED" else None
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
        "callback": same["callback"] if same else None,
        "callback_sent": same["callback_sent"] if same else False,
        "progress": same["progress"] if same else None,
        "envelope_at": inbox or (same["envelope_at"] if same else None),
        "fallback": same["fallback"] if same else None,
        "fallback_pending": same["fallback_pending"] if same else False,
        "input": None if asked is None else InputRequest.model_validate(asked).model_dump(mode="json"),
        "turns": previous["turns"] if previous else [],
        "usage": None if usage is None else {name: usage[name] for name in USAGE_FIELDS},
        "fanout": _fanout(previous, same is not None),
        "children_usage": children.model_dump(mode="json") if children is not None else None,
    }


def settle(before: Row | None, after: Row, receipt: Mapping[str, Any], raw: bytes) -> tuple[Row, bytes | None]:
    """The row after its reply bookkeeping, and the receipt bytes to produce to `after["reply_to"]` (or None).

    The first terminal receipt of a generation is the reply, or its INPUT_REQUIRED (a turn's question: the caller
    answers it, and the next generation gets its own reply). The router's receipts carry reply_to, but
    an agent's terminal receipt can land before the router's ROUTED one (that is produced from the
    forward's delivery report): such a receipt is kept on the row until a ROUTED receipt says where it
    goes (or that nobody waits: a ROUTED receipt without reply_to drops it)."""
    if after["replied"] or receipt["generation"] != after["generation"]:
        return after, None
    newly = _answers(after) and (before is None or not _answers(before) or before["generation"] != after["generation"])
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


def _answers(row: Mapping[str, Any]) -> bool:
    """The row's generation has what a waiting caller gets: its ending, or the question its handler asks
    (INPUT_REQUIRED ends the turn; the answer runs as the next generation, whose ending is its own reply)."""
    return row["status"] in _TERMINAL or row["status"] == "INPUT_REQUIRED"


def _routed_seen(row: Mapping[str, Any], generation: int) -> bool:
    return any(s["status"] == "ROUTED" and s["generation"] == generation for s in row["timeline"])


# -- the same steps on the models (callers that hold a StatusRow and a Receipt) ---------------------------------


def fold(row: StatusRow | None, receipt: Receipt, *, reply_to: str | None = None) -> StatusRow:
    """`step` on the models."""
    after = step(_dumped(row), receipt.model_dump(), reply_to=reply_to)
    return StatusRow.model_validate(after)


def settle_reply(before: StatusRow | None, after: StatusRow, receipt: Receipt, raw: bytes) -> tuple[
        StatusRow, bytes | None]:
    """`settle` on the models."""
    dumped = after.model_dump(mode="json")
    settled, reply = settle(_dumped(before), dumped, receipt.model_dump(), raw)
    return (after if settled is dumped else StatusRow.model_validate(settled)), reply


def _dumped(row: StatusRow | None) -> Row | None:
    return None if row is None else row.model_dump(mode="json")


def expired(row: StatusRow, now_ms: int, retention_ms: int) -> bool:
    """A terminal row is tombstoned `retention_ms` after it turned terminal."""
    return row.terminal_at is not None and now_ms - row.terminal_at >= retention_ms


def stale_no_route(rows: list[StatusRow], *, now_ms: int, threshold_ms: int, served: set[str]) -> dict[str, int]:
    """NO_ROUTE dead letters older than the threshold whose capability still has no READY instance."""
    stale: dict[str, int] = {}
    for row in rows:
        if (row.status is Status.DEAD_LETTERED and row.last_error is not None and row.last_error.code == "NO_ROUTE"
                and row.terminal_at is not None and now_ms - row.terminal_at >= threshold_ms
                and row.capability not in served):
            stale[row.capability] = stale.get(row.capability, 0) + 1
    return stale
