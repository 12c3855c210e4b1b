"""The handoff desk's use cases: the queue of requests waiting for a human, taking one, resolving it (an answer
completes the message, a capability re-routes it and maps the intent)."""

from __future__ import annotations

from typing import Any

from reach.intent.desk import HandoffDesk
from reach.intent.handoff import Handoff
from reach.names import Names
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
    """Claim a handoff (others see who has it)."""
    return desk.take(message_id, by=by)


def resolve(desk: HandoffDesk, message_id: str, *, by: str, answer: str | None = None,
            capability: str | None = None) -> Handoff:
    """Answer a handoff (COMPLETED, marked human) when `answer` is given, else re-route it to `capability`."""
    return (desk.answer(message_id, answer, by=by) if answer is not None
            else desk.reroute(message_id, str(capability), by=by))
