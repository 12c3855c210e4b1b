"""Produce envelopes with reach's idempotent producer and await the broker's ack without blocking the loop.

Many concurrent requests share one producer and its batches; the event loop polls it while acknowledgements are
awaited (reach.kafka.pipeline.AsyncProducer, as the SDK's AsyncClient), and each request's 202 waits for its own
acknowledgement."""

from __future__ import annotations

import asyncio

from reach import client as sdk
from reach import tracing
from reach.errors import InfraUnavailable, ReachError
from reach.kafka import clients, codec, pipeline
from reach.kafka import headers as h
from reach.records import Envelope, Receipt

Producing = pipeline.Producing


class BrokerRefused(ReachError):
    """The broker refused one envelope (its size or bytes); nothing was written."""


class KafkaPublisher:
    """One producer per gateway process (reach.kafka.pipeline.AsyncProducer).

    librdkafka's message.timeout.ms is the ack timeout, so an unacknowledged envelope ends in a definite
    delivery error (the caller gets 503 and may retry with the same idempotency_key) instead of an
    asyncio timeout racing a late ack."""

    def __init__(self, client: sdk.Client, *, ack_timeout_s: float, producer: Producing | None = None) -> None:
        self._client = client
        self._ack_timeout = ack_timeout_s
        timeout_ms = max(1000, int(ack_timeout_s * 1000))
        self._producer = pipeline.AsyncProducer(
            producer or clients.producer(client.kafka, profile="hot", **{"message.timeout.ms": timeout_ms}))
        self._failing = False  # the last publish went unacknowledged: /healthz says so until one is acked

    async def publish(self, envelope: Envelope) -> None:
        topic = self._client.target(envelope)
        if not self._client.ensured(topic):  # metadata round trips: off the event loop, once per topic
            await asyncio.to_thread(self._client.ensure_topic, topic)
        with tracing.intake(envelope, topic):  # the trace's root: a SERVER span around the send and its ack
            await self._acked(self._client.outbound(envelope, topic=topic), envelope.message_id,
                              "retry with the same idempotency_key")

    async def receipt(self, receipt: Receipt) -> None:
        """A receipt to `<ns>.receipts` keyed by its message id (a provider's delivery report), acknowledged."""
        key = receipt.message_id.encode()
        record = pipeline.Outbound(self._client.names.receipts, codec.encode(receipt), key, [(h.MESSAGE_ID, key)])
        await self._acked(record, receipt.message_id, "post the report again")

    async def _acked(self, record: pipeline.Outbound, what: str, hint: str) -> None:
        """Produce and wait for the broker's ack: BrokerRefused when it refused the record, else InfraUnavailable."""
        outcome = await self._producer.deliver(record)
        if outcome is None:
            self._failing = False
            return
        if isinstance(outcome, pipeline.Refused) and outcome.code in pipeline.RECORD_FAULTS:
            raise BrokerRefused(f"the broker refused {what}: {outcome}")
        self._failing = True
        raise InfraUnavailable(f"the broker did not acknowledge {what} on {record.topic} within "
                               f"{self._ack_timeout:g}s ({outcome}); {hint}")

    def healthy(self) -> bool:
        return not self._failing

    def close(self) -> None:
        self._producer.close(10)
