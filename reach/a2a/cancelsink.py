"""Produce cancel records to `<ns>.cancels` and wait for the broker's ack (the gateway's and `reach cancel`'s)."""

from __future__ import annotations

import asyncio
import threading

from reach.cancels import CancelRecord
from reach.errors import InfraUnavailable
from reach.kafka import clients
from reach.kafka.types import KafkaError, Message, Producer
from reach.settings import KafkaSettings

ACK_TIMEOUT_S = 10.0


class KafkaCancels:
    """A producer of its own: cancels are rare, so one flush per cancel (in a worker thread) is enough."""

    def __init__(self, *, topic: str, kafka: KafkaSettings, producer: Producer | None = None) -> None:
        self.topic = topic
        self._producer = producer or clients.producer(kafka, profile="hot")
        self._lock = threading.Lock()

    def send(self, record: CancelRecord, timeout_s: float = ACK_TIMEOUT_S) -> None:
        """Blocking: returns once acknowledged; InfraUnavailable otherwise."""
        errors: list[KafkaError | None] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            errors.append(err)

        with self._lock:
            self._producer.produce(self.topic, value=record.encode(), key=record.message_id.encode(),
                                   on_delivery=delivered)
            self._producer.flush(timeout_s)
        if not errors or errors[0] is not None:
            raise InfraUnavailable(f"the broker did not acknowledge the cancel of {record.message_id} on {self.topic} "
                                   f"({errors[0] if errors else 'no answer'}); retry, or check the broker")

    async def cancel(self, record: CancelRecord) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.send, record)

    def close(self) -> None:
        self._producer.flush(5)
