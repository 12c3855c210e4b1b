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

The status fold runs a request's plain receipts through `reach.core.rowfold`, the same fold on JSON dicts
(docs/decisions/0050-status-fold-on-dicts.md): a change to the row or to `fold` / `settle_reply` is made there too,
and tests/unit/streams/test_status_rowfold.py fails until both write the same rows.
"""

from __future__ import annotations

import base64

from pydantic import BaseModel, ConfigDict

from reach.core.allowance import children_of
from reach.core.fanout import FanOutRow, carried, track
from reach.core.progress import Chunks, fold_progress
from reach.core.turns import AUTH, kind_of
from reach.records import DELIVERY, ChannelDelivery, ErrorInfo, InputRequest, Receipt, Status, Usage

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


def _error(error: ErrorInfo | None) -> ErrorInfo | None:
    if error is None or len(error.message) <= MAX_ERROR_CHARS:
        return error
    return error.model_copy(update={"message": error.message[:MAX_ERROR_CHARS] + "…"})


def _step(receipt: Receipt) -> Step:
    return Step(generation=receipt.generation, attempt=receipt.attempt, status=receipt.status, at=receipt.at,
                agent_id=receipt.agent_id, instance_id=receipt.instance_id, error=_error(receipt.error),
                channel=receipt.channel)


def _result_text(receipt: Receipt) -> tuple[str | None, bool]:
    if receipt.result is None:
        return None, False
    text = receipt.result.decode("utf-8", errors="replace")
    return (text[:MAX_RESULT_CHARS], True) if len(text) > MAX_RESULT_CHARS else (text, False)


def fold(row: StatusRow | None, receipt: Receipt, *, reply_to: str | None = None) -> StatusRow:
    """Apply one receipt. First terminal per (message_id, generation) wins; later ones only extend the
    timeline; an exact duplicate changes nothing; a newer generation (a replay) reopens the row.
    `reply_to` is the envelope's reply topic when the receipt's writer knew it (the router does)."""
    if receipt.status is Status.PROGRESS:
        return _progress(row, receipt)
    after = track(_fold(row, receipt), receipt)
    if reply_to and after.reply_to is None and receipt.generation == after.generation:
        after = after.model_copy(update={"reply_to": reply_to})
    if receipt.callback and after.callback is None and receipt.generation == after.generation:
        after = after.model_copy(update={"callback": receipt.callback})
    if after.envelope_at is None and receipt.status is Status.ROUTED and receipt.generation == after.generation:
        at = _inbox(receipt)  # a ROUTED folded after the agent's ending: the fallback still needs the envelope
        if at is not None:
            after = after.model_copy(update={"envelope_at": at})
    if receipt.input is not None and receipt.input.answer is not None:
        after = _answered(after, receipt, receipt.input)
    return after


def _inbox(receipt: Receipt) -> tuple[str, int, int] | None:
    decision = receipt.decision
    if decision and decision.topic and decision.partition is not None and decision.offset is not None:
        return decision.topic, decision.partition, decision.offset
    return None


def _answered(row: StatusRow, receipt: Receipt, answered: InputRequest) -> StatusRow:
    """The answer an ACCEPTED receipt of a next turn carries joins the row's turns (once per turn)."""
    if any(t.turn == answered.turn for t in row.turns):
        return row
    turn = AnsweredTurn(turn=answered.turn, generation=receipt.generation, question=answered.question,
                        answer=(answered.answer or "")[:MAX_ANSWER_CHARS], at=receipt.at,
                        auth=kind_of(answered.answer_schema) == AUTH)
    turns = sorted([*row.turns, turn], key=lambda t: t.turn)[-MAX_ROW_TURNS:]
    return row.model_copy(update={"turns": turns})


def _progress(row: StatusRow | None, receipt: Receipt) -> StatusRow:
    """PROGRESS updates the row's progress only. It says a handler runs: a row not seen yet, or an older
    generation, reads it as STARTED (the agent publishes STARTED first, on the same partition, so only a lost
    row or a reordered replay gets here); an ended row or an older generation's PROGRESS is kept as it is."""
    if row is None or receipt.generation > row.generation:
        row = _current(receipt.model_copy(update={"status": Status.STARTED, "progress": None}),
                       list(row.timeline) if row else [], row)
    if receipt.progress is None or row.terminal or receipt.generation != row.generation:
        return row
    return row.model_copy(update={"progress": fold_progress(row.progress, receipt.attempt, receipt.progress,
                                                            receipt.at)})


def _fold(row: StatusRow | None, receipt: Receipt) -> StatusRow:
    step = _step(receipt)
    if row is None or receipt.generation > row.generation:
        return _current(receipt, [*(row.timeline if row else []), step], row)
    if step in row.timeline:
        return row
    timeline = sorted([*row.timeline, step], key=_order)
    dropped = max(0, len(timeline) - MAX_STEPS)
    if receipt.generation < row.generation or row.terminal or not _advances(row, receipt):
        return row.model_copy(update={"timeline": timeline[dropped:], "dropped_steps": row.dropped_steps + dropped})
    return _current(receipt, timeline, row)


def _order(step: Step) -> tuple[int, int, int, int]:
    return step.generation, step.attempt, _PHASE.get(step.status, 2), step.at


def _advances(row: StatusRow, receipt: Receipt) -> bool:
    if receipt.status.is_terminal:
        return True
    if receipt.status is Status.UNKNOWN or receipt.status in DELIVERY:
        return False  # a newer writer's step or a channel's delivery step: timeline only, the row keeps its status
    if receipt.status is Status.FANNED_OUT and row.status is Status.FANNED_OUT:
        return False  # a delivery's ending (or the router's step read again): the parent's timeline only
    return (receipt.attempt, _rank(receipt)) >= (row.attempt, _RANK.get(row.status, 0))


def _rank(receipt: Receipt) -> int:
    """A handoff (the router found no instance, a human now holds it) moves a ROUTED row on: a delivery timeout
    no longer applies, so the timekeeper does not reroute it again (and reopen its handoff)."""
    resolution = receipt.resolution
    if receipt.status is Status.INTENT_RESOLVED and resolution is not None and resolution.stage == "handoff":
        return _RANK[Status.ROUTED]
    return _RANK[receipt.status]


def _current(receipt: Receipt, timeline: list[Step], previous: StatusRow | None) -> StatusRow:
    """The row with `receipt` as its current status; reply bookkeeping carries over within a generation."""
    dropped = max(0, len(timeline) - MAX_STEPS)
    timeline = timeline[dropped:]
    same = previous is not None and previous.generation == receipt.generation
    terminal = receipt.status.is_terminal
    result, truncated = _result_text(receipt) if terminal else (None, False)
    routed = receipt.status is Status.ROUTED
    inbox = _inbox(receipt) if routed else None
    return StatusRow(
        deadline=receipt.deadline or (previous.deadline if same and previous else None),
        delivery_due_at=receipt.at + receipt.delivery_timeout_ms if routed and receipt.delivery_timeout_ms else None,
        inbox=inbox, routed_instance=receipt.instance_id if routed else None, reroutes=receipt.reroutes,
        message_id=receipt.message_id, trace_id=receipt.trace_id, tenant=receipt.tenant,
        capability=receipt.capability, generation=receipt.generation, status=receipt.status,
        attempt=receipt.attempt, agent_id=receipt.agent_id, instance_id=receipt.instance_id,
        last_error=_error(receipt.error) or _last_error(timeline, receipt.generation),
        result=result, result_truncated=truncated,
        terminal_at=receipt.at if terminal else None, updated_at=receipt.at, timeline=timeline,
        dropped_steps=(previous.dropped_steps if previous else 0) + dropped,
        reply_to=previous.reply_to if same and previous else None,
        replied=previous.replied if same and previous else False,
        pending_reply=previous.pending_reply if same and previous else None,
        callback=previous.callback if same and previous else None,
        callback_sent=previous.callback_sent if same and previous else False,
        progress=previous.progress if same and previous else None,
        envelope_at=inbox or (previous.envelope_at if same and previous else None),
        fallback=previous.fallback if same and previous else None,
        fallback_pending=previous.fallback_pending if same and previous else False,
        input=receipt.input if receipt.status is Status.INPUT_REQUIRED else None,
        turns=previous.turns if previous else [],
        usage=receipt.usage if terminal else None,
        fanout=carried(previous.fanout if previous else None, same),
        children_usage=children_of(receipt.timings).usage() if terminal else None,
    )


def settle_reply(before: StatusRow | None, after: StatusRow, receipt: Receipt, raw: bytes) -> tuple[
        StatusRow, bytes | None]:
    """The row after its reply bookkeeping, and the receipt bytes to produce to `after.reply_to` (or None).

    The first terminal receipt of a generation is the reply, or its INPUT_REQUIRED (a turn's question: the caller
    answers it, and the next generation gets its own reply). The router's receipts carry reply_to, but
    an agent's terminal receipt can land before the router's ROUTED one (that is produced from the
    forward's delivery report): such a receipt is kept on the row until a ROUTED receipt says where it
    goes (or that nobody waits: a ROUTED receipt without reply_to drops it)."""
    if after.replied or receipt.generation != after.generation:
        return after, None
    newly_terminal = _answers(after) and (before is None or not _answers(before)
                                          or before.generation != after.generation)
    if newly_terminal:
        if after.reply_to:
            return after.model_copy(update={"replied": True, "pending_reply": None}), raw
        if receipt.instance_id is not None and not _routed_seen(after, receipt.generation):
            return after.model_copy(update={"pending_reply": base64.b64encode(raw).decode()}), None
        return after, None
    if after.pending_reply is not None:
        if after.reply_to:
            return (after.model_copy(update={"replied": True, "pending_reply": None}),
                    base64.b64decode(after.pending_reply))
        if receipt.status is Status.ROUTED:
            return after.model_copy(update={"pending_reply": None}), None
    return after, None


def _answers(row: StatusRow) -> bool:
    """The row's generation has what a waiting caller gets: its ending, or the question its handler asks
    (INPUT_REQUIRED ends the turn; the answer runs as the next generation, whose ending is its own reply)."""
    return row.terminal or row.status is Status.INPUT_REQUIRED


def _routed_seen(row: StatusRow, generation: int) -> bool:
    return any(s.status is Status.ROUTED and s.generation == generation for s in row.timeline)


def _last_error(timeline: list[Step], generation: int) -> ErrorInfo | None:
    errors = [s.error for s in timeline if s.generation == generation and s.error is not None]
    return errors[-1] if errors else None


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
