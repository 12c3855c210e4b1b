"""Producing records on behalf of an input record: a produce error fails that input, never the loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from reach.kafka.acks import Acks, Position

# Refusals that no retry cures: the record must be dead-lettered, or it would be refused forever.
PERMANENT = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION, KafkaError._INVALID_ARG, KafkaError.TOPIC_EXCEPTION,
})

PROPAGATION_MS = 10_000
"""librdkafka's topic.metadata.propagation.max.ms for producers that use this module: how long a record for a
topic missing from metadata waits before it fails as unknown. Below their 30 s flush, so a topic that does not
exist is refused (and dead-lettered) within one batch instead of holding its input partition."""


def permanent(error: Any) -> bool:
    """True for a refusal no retry cures (too large, unknown or forbidden topic); False for outages."""
    err = error.args[0] if isinstance(error, KafkaException) and error.args else error
    return isinstance(err, KafkaError) and err.code() in PERMANENT


def describe(error: Any) -> str:
    err = error.args[0] if isinstance(error, KafkaException) and error.args else error
    return err.str() if isinstance(err, KafkaError) else str(err)


def produce(producer: Producer, acks: Acks, position: Position | Sequence[Position], topic: str,
            value: bytes | None, *, key: bytes | str | None = None, headers: Any = None,
            partition: int | None = None, then: Callable[[Message], None] | None = None) -> bool:
    """Produce one record caused by the input at `position` (or by each of several inputs); False when it could
    not even be queued.

    `then(msg)` runs on a successful delivery before the record counts as acknowledged (the router
    writes a ROUTED receipt from its forward's delivery report). A full queue is waited out once."""
    if isinstance(position, tuple):
        report = acks.expect(position)
    else:
        reports = [acks.expect(p) for p in position]

        def report(err: Any, msg: Any) -> None:
            for each in reports:
                each(err, msg)

    def delivered(err: Any, msg: Message) -> None:
        if err is None and then is not None:
            try:
                then(msg)
            except Exception as exc:  # noqa: BLE001 - a follow-up that cannot be produced fails the input
                err = exc
        report(err, msg)

    extra: dict[str, Any] = {} if partition is None else {"partition": partition}
    error: BaseException | None = None
    for _ in range(2):
        try:
            producer.produce(topic, value, key=key, headers=headers, on_delivery=delivered, **extra)
            return True
        except BufferError as exc:  # the local queue is full: serve delivery reports, then try once more
            error = exc
            producer.poll(1.0)
        except Exception as exc:  # noqa: BLE001 - KafkaException (too large, unknown partition), TypeError
            error = exc
            break
    report(error, None)
    return False
