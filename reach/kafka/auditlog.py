"""Reading `<ns>.audit` back: the listing (reach.ops.audit) and the audit writer's own rebuild
(reach.streams.audit) both read it here; and the operations layer's own events (redrives, handoff moves, cancels:
reach.core.audit.operation) appended here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from reach.errors import InfraUnavailable
from reach.kafka import clients, codec, topicreader
from reach.kafka.codec import DecodeError
from reach.names import Names
from reach.records import AuditEvent
from reach.settings import KafkaSettings


def read_events(*, names: Names, kafka: KafkaSettings, since_ms: int | None = None, until_ms: int | None = None,
                timeout: float = 10.0, skipped: list[int] | None = None) -> Iterator[AuditEvent]:
    """The events appended since `since_ms` (all when None), in append order; undecodable ones are counted in
    `skipped` (one element) and left out."""
    reader = topicreader.open_reader("audit", kafka)
    try:
        starts = topicreader.start_offsets(reader, names.audit, since_ms, timeout)
        for msg in topicreader.read_range(reader, names.audit, starts, idle_timeout=timeout):
            try:
                yield codec.decode(msg.value() or b"", AuditEvent)
            except DecodeError:
                if skipped is not None:
                    skipped[0] += 1
    finally:
        reader.close()


def append(events: Iterable[AuditEvent], *, names: Names, kafka: KafkaSettings, producer: Any = None) -> None:
    """Append `events` to `<ns>.audit`, keyed by subject; waits for the broker when it made the producer itself
    (`producer`: the caller's, which it flushes)."""
    own = producer is None
    out = clients.producer(kafka, profile="feed") if own else producer  # audit records, as the audit writer (0052)
    for event in events:
        out.produce(names.audit, codec.encode(event), key=event.subject.encode())
    if own and out.flush(30):
        raise InfraUnavailable(f"the broker did not acknowledge the audit events on {names.audit}")
