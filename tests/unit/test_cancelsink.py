"""The cancel producer: a cancel is sent keyed by its message id and returns once acked; no ack is an error."""

from __future__ import annotations

from typing import Any

import pytest

from reach.a2a.cancelsink import KafkaCancels
from reach.cancels import CancelRecord, decode
from reach.errors import InfraUnavailable
from reach.settings import KafkaSettings


class Producer:
    def __init__(self, error: Any = None, acks: bool = True) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.error, self.acks, self.pending = error, acks, []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.sent.append((topic, key, value))
        self.pending.append(on_delivery)

    def flush(self, timeout: float) -> int:
        if self.acks:
            for callback in self.pending:
                callback(self.error, None)
        self.pending.clear()
        return 0


def test_a_cancel_is_keyed_by_its_message_and_waits_for_the_ack() -> None:
    producer = Producer()
    sink = KafkaCancels(topic="ns.cancels", kafka=KafkaSettings(), producer=producer)
    sink.send(CancelRecord(message_id="m1", tenant="acme", at=5))
    [(topic, key, value)] = producer.sent
    assert (topic, key, decode(value).tenant) == ("ns.cancels", b"m1", "acme")
    for broken in (Producer(error="broker down"), Producer(acks=False)):
        with pytest.raises(InfraUnavailable, match="did not acknowledge the cancel of m1"):
            sink = KafkaCancels(topic="ns.cancels", kafka=KafkaSettings(), producer=broken)
            sink.send(CancelRecord(message_id="m1", at=5))
