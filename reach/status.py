"""The status table's row and its pure transition function (receipts fold into one row per message)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from reach.records import ErrorInfo, Receipt, Status

# Within one attempt, a later step never moves the row back (ROUTED can arrive after STARTED:
# the router writes its receipt after the forward is acked, the agent may start before that).
_RANK = {
    Status.ACCEPTED: 0,
    Status.ROUTED: 1,
    Status.STARTED: 2,
    Status.ATTEMPT_FAILED: 3,
    Status.RETRY_SCHEDULED: 4,
}


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

    @property
    def terminal(self) -> bool:
        return self.status.is_terminal


def _step(receipt: Receipt) -> Step:
    return Step(generation=receipt.generation, attempt=receipt.attempt, status=receipt.status, at=receipt.at,
                agent_id=receipt.agent_id, instance_id=receipt.instance_id, error=receipt.error)


def _result_text(receipt: Receipt) -> str | None:
    if receipt.result is None:
        return None
    return receipt.result.decode("utf-8", errors="replace")


def fold(row: StatusRow | None, receipt: Receipt) -> StatusRow:
    """Apply one receipt. First terminal per (message_id, generation) wins; later ones only extend the
    timeline; an exact duplicate changes nothing; a newer generation (a replay) reopens the row."""
    step = _step(receipt)
    if row is None or receipt.generation > row.generation:
        return _current(receipt, [*(row.timeline if row else []), step], None)
    if step in row.timeline:
        return row
    timeline = sorted([*row.timeline, step], key=lambda s: (s.generation, s.at))
    if receipt.generation < row.generation or row.terminal or not _advances(row, receipt):
        return row.model_copy(update={"timeline": timeline})
    return _current(receipt, timeline, row)


def _advances(row: StatusRow, receipt: Receipt) -> bool:
    if receipt.status.is_terminal:
        return True
    if receipt.status is Status.UNKNOWN:  # a step of a newer writer: timeline only, the row keeps its status
        return False
    return (receipt.attempt, _RANK[receipt.status]) >= (row.attempt, _RANK.get(row.status, 0))


def _current(receipt: Receipt, timeline: list[Step], previous: StatusRow | None) -> StatusRow:
    terminal = receipt.status.is_terminal
    routed = receipt.status is Status.ROUTED
    decision = receipt.decision
    inbox = None
    if routed and decision and decision.topic and decision.partition is not None and decision.offset is not None:
        inbox = (decision.topic, decision.partition, decision.offset)
    return StatusRow(
        deadline=receipt.deadline or (previous.deadline if previous else None),
        delivery_due_at=receipt.at + receipt.delivery_timeout_ms if routed and receipt.delivery_timeout_ms else None,
        inbox=inbox, routed_instance=receipt.instance_id if routed else None, reroutes=receipt.reroutes,
        message_id=receipt.message_id, trace_id=receipt.trace_id, tenant=receipt.tenant,
        capability=receipt.capability, generation=receipt.generation, status=receipt.status,
        attempt=receipt.attempt, agent_id=receipt.agent_id, instance_id=receipt.instance_id,
        last_error=receipt.error or _last_error(timeline, receipt.generation),
        result=_result_text(receipt) if terminal else None,
        terminal_at=receipt.at if terminal else None, updated_at=receipt.at, timeline=timeline,
    )


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
