"""The gateway's publisher over a fake producer: acks are served a poll at a time (not one wake-up per request), a
refused record is a BrokerRefused, an unacknowledged one an InfraUnavailable that /healthz shows."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from reach.client import Client
from reach.envelopes import new_envelope
from reach.errors import InfraUnavailable
from reach.gateway.publisher import BrokerRefused, KafkaPublisher
from reach.settings import KafkaSettings, ReachSettings


class FakeProducer:
    """Queues delivery callbacks; `poll` serves every queued one at once, with `error_for(value)`."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, bytes]] = []
        self.lock = threading.Lock()
        self.errors: dict[bytes, KafkaError] = {}
        self.topics: list[str] = []
        self.served: list[int] = []  # acks per poll that served any

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *args: Any,
                **kwargs: Any) -> None:
        with self.lock:
            self.topics.append(topic)
            self.pending.append((kwargs["on_delivery"], value or b""))

    def poll(self, timeout: float = 0.0, /) -> int:
        time.sleep(0.02)  # a batch builds up meanwhile, as acks do while the broker writes
        with self.lock:
            served, self.pending = self.pending, []
        if served:
            self.served.append(len(served))
        for callback, value in served:
            callback(next((e for marker, e in self.errors.items() if marker in value), None), None)
        return len(served)

    def flush(self, timeout: float = 0.0, /) -> int:
        self.poll(0)
        return 0


def _publisher(producer: FakeProducer) -> KafkaPublisher:
    client = Client(kafka=KafkaSettings(bootstrap="memory://gateway-publisher"), settings=ReachSettings(namespace="t"),
                    follow_control=False)
    return KafkaPublisher(client, ack_timeout_s=1.0, producer=producer)


def test_many_acks_are_served_by_few_polls() -> None:
    producer = FakeProducer()
    pub = _publisher(producer)

    async def main() -> None:
        await asyncio.gather(*(pub.publish(new_envelope("demo.echo", {"i": i})) for i in range(200)))

    try:
        asyncio.run(main())
    finally:
        pub.close()
    # every request got its own ack; the polls that served them served many at once, never one poll per ack
    assert sum(producer.served) == 200 and len(producer.served) < 200, producer.served
    assert set(producer.topics) == {"t.cap.demo.echo"} and pub.healthy()


def test_a_refused_record_and_an_unacknowledged_one() -> None:
    producer = FakeProducer()
    producer.errors = {b"too-big": KafkaError(KafkaError.MSG_SIZE_TOO_LARGE),
                       b"lost": KafkaError(KafkaError._MSG_TIMED_OUT)}
    pub = _publisher(producer)

    async def main() -> None:
        with pytest.raises(BrokerRefused, match="refused"):
            await pub.publish(new_envelope("demo.echo", {"text": "too-big"}))
        assert pub.healthy()  # one bad record says nothing about the broker
        with pytest.raises(InfraUnavailable, match="did not acknowledge"):
            await pub.publish(new_envelope("demo.echo", {"text": "lost"}))
        assert not pub.healthy()
        await pub.publish(new_envelope("demo.echo", {"text": "fine"}))
        assert pub.healthy()

    try:
        asyncio.run(main())
    finally:
        pub.close()
