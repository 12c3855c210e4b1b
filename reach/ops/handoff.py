"""The handoff desk's use cases: the queue of requests waiting for a human, taking one, resolving it (an answer
completes the message, a capability re-routes it and maps the intent)."""

from __future__ import annotations

from typing import Any

from reach.core.audit import operation
from reach.envelopes import now_ms
from reach.intent.desk import HandoffDesk
from reach.intent.handoff import Handoff
from reach.kafka import auditlog
from reach.names import Names
from reach.records import AuditKind
from reach.settings import KafkaSettings, RedisSettings

OPEN = ("OPEN", "TAKEN")  # waiting for a human


def desk(names: Names, kafka: KafkaSettings, redis: RedisSettings) -> HandoffDesk:
    """The desk over the namespace's handoff topic."""
    return HandoffDesk(names=names, kafka=kafka, redis=redis)


def queue(desk: HandoffDesk, *, all_: bool = False) -> list[Handoff]:
    """Open and taken handoffs (with all_, the answered and re-routed too), oldest first."""
    return sorted((h for h in desk.all().values() if all_ or h.state in OPEN), key=lambda h: h.at)


def summary(h: Handoff) -> dict[str, Any]:
    """A handoff's context bundle without the original envelope's bytes (`reach handoff ls --json`, the console)."""
    return h.model_dump(exclude={"envelope"})


def take(desk: HandoffDesk, message_id: str, *, by: str) -> Handoff:
    """Claim a handoff (others see who has it); a HANDOFF audit event by `by`."""
    moved = desk.take(message_id, by=by)
    _audit(desk, message_id, by=by, action="take")
    return moved


def resolve(desk: HandoffDesk, message_id: str, *, by: str, answer: str | None = None,
            capability: str | None = None) -> Handoff:
    """Answer a handoff (COMPLETED, marked human) when `answer` is given, else re-route it to `capability`; a
    HANDOFF audit event by `by` (the answer's text stays out of it)."""
    if answer is not None:
        moved = desk.answer(message_id, answer, by=by)
        _audit(desk, message_id, by=by, action="answer")
    else:
        moved = desk.reroute(message_id, str(capability), by=by)
        _audit(desk, message_id, by=by, action="reroute", capability=capability)
    return moved


def _audit(desk: HandoffDesk, message_id: str, *, by: str, **done: Any) -> None:
    event = operation(AuditKind.HANDOFF, message_id, actor=by, at=now_ms(), after=done)
    auditlog.append([event], names=desk.names, kafka=desk.kafka)
