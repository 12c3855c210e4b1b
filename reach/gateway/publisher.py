"""Produce envelopes with reach's idempotent producer and await the broker's ack without blocking the loop."""

from __future__ import annotations

import asyncio

from reach import clients, codec, tracing
from reach import headers as h
from reach.agent.exceptions import DeliveryFailed, RecordRefused
from reach.agent.publisher import Publisher as Sender
from reach.client import Client
from reach.envelopes import routing_key
from reach.errors import InfraUnavailable, ReachError
from reach.records import Envelope


class BrokerRefused(ReachError):
    """The broker refused one envelope (its size or bytes); nothing was written."""


class KafkaPublisher:
    """One producer per gateway process; a background thread serves delivery reports and resolves futures.

    librdkafka's message.timeout.ms is the ack timeout, so an unacknowledged envelope ends in a definite
    delivery error (the caller gets 503 and may retry with the same idempotency_key) instead of an
    asyncio timeout racing a late ack."""

    def __init__(self, client: Client, *, ack_timeout_s: float) -> None:
        self._client = client
        self._ack_timeout = ack_timeout_s
        timeout_ms = max(1000, int(ack_timeout_s * 1000))
        self._sender = Sender(clients.producer(client.kafka, **{"message.timeout.ms": timeout_ms}))
        self._ensured: set[str] = set()
        self._failing = False  # the last publish went unacknowledged: /healthz says so until one is acked

    async def publish(self, envelope: Envelope) -> None:
        topic = self._client.names.capability(envelope.capability)
        if topic not in self._ensured:  # metadata round trips: off the event loop, once per topic
            await asyncio.to_thread(self._client.ensure_topic, topic)
            self._ensured.add(topic)
        headers: h.Headers = [*tracing.inject(envelope), (h.MESSAGE_ID, envelope.message_id.encode())]
        ack = self._sender.send(topic, routing_key(envelope), codec.encode(envelope), headers=headers)
        try:
            # the margin covers the delivery report's own latency after librdkafka's timeout fires
            await asyncio.wait_for(asyncio.wrap_future(ack), self._ack_timeout + 5)
        except RecordRefused as exc:
            raise BrokerRefused(f"the broker refused {envelope.message_id}: {exc}") from None
        except (DeliveryFailed, TimeoutError) as exc:
            self._failing = True
            raise InfraUnavailable(f"the broker did not acknowledge {envelope.message_id} on {topic} within "
                                   f"{self._ack_timeout:g}s ({exc or 'timeout'}); retry with the same "
                                   "idempotency_key") from None
        self._failing = False

    def healthy(self) -> bool:
        return not self._failing

    def close(self) -> None:
        self._sender.close(10)
