"""Produce envelopes with reach's idempotent producer and await the broker's ack without blocking the loop."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message

from reach import client as sdk
from reach import tracing
from reach.agent.exceptions import RecordRefused
from reach.agent.publisher import refusal
from reach.envelopes import routing_key
from reach.errors import InfraUnavailable, ReachError
from reach.intent.catalog import RESERVED as INTENT_CAPABILITY
from reach.kafka import clients, codec
from reach.kafka import headers as h
from reach.records import Envelope, Receipt

POLL_S = 0.1
FULL_QUEUE_WAIT_S = 0.005  # librdkafka's local queue is full: the poll thread drains it meanwhile

Ack = tuple["asyncio.Future[KafkaError | None]", "KafkaError | None"]


class BrokerRefused(ReachError):
    """The broker refused one envelope (its size or bytes); nothing was written."""


class Producing(Protocol):
    """The part of confluent_kafka.Producer the publisher uses (a fake in unit tests)."""

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *args: Any,
                **kwargs: Any) -> None: ...

    def poll(self, timeout: float = ..., /) -> int: ...

    def flush(self, timeout: float = ..., /) -> int: ...


def _resolve(acks: list[Ack]) -> None:
    """On the event loop: every ack one poll served (a waiter that gave up is skipped)."""
    for future, err in acks:
        if not future.done():
            future.set_result(err)


class KafkaPublisher:
    """One producer per gateway process; a background thread polls it and hands each poll's delivery reports
    to the event loop in one `call_soon_threadsafe` (one wake-up for many acks, not one per request).

    librdkafka's message.timeout.ms is the ack timeout, so an unacknowledged envelope ends in a definite
    delivery error (the caller gets 503 and may retry with the same idempotency_key) instead of an
    asyncio timeout racing a late ack."""

    def __init__(self, client: sdk.Client, *, ack_timeout_s: float, producer: Producing | None = None) -> None:
        self._client = client
        self._ack_timeout = ack_timeout_s
        timeout_ms = max(1000, int(ack_timeout_s * 1000))
        self._producer = producer or clients.producer(client.kafka, profile="hot", **{"message.timeout.ms": timeout_ms})
        self._ensured: set[str] = set()
        self._failing = False  # the last publish went unacknowledged: /healthz says so until one is acked
        self._served: list[Ack] = []  # filled by delivery callbacks, only ever on the poll thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="reach-gateway-acks", daemon=True)
        self._thread.start()

    async def publish(self, envelope: Envelope) -> None:
        names = self._client.names
        topic = names.intents if envelope.capability == INTENT_CAPABILITY else names.capability(envelope.capability)
        if topic not in self._ensured:  # metadata round trips: off the event loop, once per topic
            await asyncio.to_thread(self._client.ensure_topic, topic)
            self._ensured.add(topic)
        headers: h.Headers = [*tracing.inject(envelope), (h.MESSAGE_ID, envelope.message_id.encode())]
        await self._acked(topic, routing_key(envelope).encode(), codec.encode(envelope), headers,
                          envelope.message_id, "retry with the same idempotency_key")

    async def receipt(self, receipt: Receipt) -> None:
        """A receipt to `<ns>.receipts` keyed by its message id (a provider's delivery report), acknowledged."""
        key = receipt.message_id
        await self._acked(self._client.names.receipts, key.encode(), codec.encode(receipt),
                          [(h.MESSAGE_ID, key.encode())], key, "post the report again")

    async def _acked(self, topic: str, key: bytes, value: bytes, headers: h.Headers, what: str, hint: str) -> None:
        """Produce and wait for the broker's ack: BrokerRefused when it refused the record, else InfraUnavailable."""
        self._loop = loop = asyncio.get_running_loop()
        ack: asyncio.Future[KafkaError | None] = loop.create_future()
        try:
            # the margin covers the delivery report's own latency after librdkafka's timeout fires
            async with asyncio.timeout(self._ack_timeout + 5):
                await self._produce(topic, key, value, headers, ack)
                err = await ack
        except TimeoutError:
            err = KafkaError(KafkaError._MSG_TIMED_OUT)
        if err is None:
            self._failing = False
            return
        failure = refusal(topic, err)
        if isinstance(failure, RecordRefused):
            raise BrokerRefused(f"the broker refused {what}: {failure}")
        self._failing = True
        raise InfraUnavailable(f"the broker did not acknowledge {what} on {topic} within "
                               f"{self._ack_timeout:g}s ({failure}); {hint}")

    async def _produce(self, topic: str, key: bytes, value: bytes, headers: h.Headers,
                       ack: asyncio.Future[KafkaError | None]) -> None:
        delivered = functools.partial(self._delivered, ack)
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: give the poll thread a moment to drain it
                await asyncio.sleep(FULL_QUEUE_WAIT_S)
            except KafkaException as exc:  # refused before queueing (e.g. over message.max.bytes)
                ack.set_result(exc.args[0])
                return

    def _delivered(self, ack: asyncio.Future[KafkaError | None], err: KafkaError | None, _msg: Message) -> None:
        self._served.append((ack, err))

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(POLL_S)
            self._hand_over()

    def _hand_over(self) -> None:
        if not self._served:
            return
        served, self._served = self._served, []
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, served)

    def healthy(self) -> bool:
        return not self._failing

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._producer.flush(10)
        self._hand_over()
