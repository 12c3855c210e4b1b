"""Producing many records with every acknowledgement checked, without waiting for each one alone.

`deliver_all` produces a batch on the caller's thread and waits once for all of its acknowledgements;
`AsyncProducer` serves asyncio callers: while acknowledgements are awaited, the event loop itself polls the producer
every millisecond and each report resolves its caller's future (no thread at all, one wake-up for many acks), so
many concurrent sends share librdkafka's batches and each still awaits its own ack. Either way every record ends in
an outcome: None (acknowledged), `Refused` (this record can never be written as it is) or `Unacknowledged` (no ack:
the broker may or may not have it; send it again with the same idempotency key). Decision 0057.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from confluent_kafka import KafkaError, KafkaException

from reach.errors import ReachError
from reach.kafka import delivery
from reach.kafka.headers import Headers

POLL_S = 0.1  # deliver_all's longest single wait for reports
FULL_QUEUE_WAIT_S = 0.005  # librdkafka's local queue is full: the poll thread drains it meanwhile

# Refusals of the record itself (its size, its bytes, its topic): sending it again as is fails again
REFUSALS = delivery.PERMANENT | {KafkaError.INVALID_MSG, KafkaError.INVALID_MSG_SIZE, KafkaError._BAD_MSG}
# ... of which the record's own bytes are at fault (not its topic: missing or forbidden is the deployment's)
RECORD_FAULTS = frozenset(KafkaError(code).name() for code in (
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG, KafkaError.INVALID_MSG_SIZE, KafkaError._BAD_MSG, KafkaError._INVALID_ARG))


class ProduceError(ReachError):
    """A record that was not acknowledged; `.code` is librdkafka's error name (e.g. MSG_SIZE_TOO_LARGE)."""

    def __init__(self, message: str, *, topic: str, code: str) -> None:
        super().__init__(message)
        self.topic = topic
        self.code = code


class Refused(ProduceError):
    """The broker (or the client, before sending) refused this record: too large, an unknown topic, bad bytes.
    Nothing was written; sending it again unchanged is refused again."""


class Unacknowledged(ProduceError):
    """No acknowledgement came (timeout, broker down): the broker may or may not have the record. Send it again
    with the same idempotency key (agents deduplicate on it)."""


Outcome = ProduceError | None


def failure(topic: str, error: Any) -> ProduceError:
    """The outcome of a record librdkafka reported `error` for (a KafkaError, or a KafkaException from produce)."""
    err = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if not isinstance(err, KafkaError):
        return Refused(f"{topic}: the record could not be produced: {err}", topic=topic, code=type(err).__name__)
    code = err.name()
    if err.code() in REFUSALS:
        return Refused(f"{topic}: the broker refused the record ({code}: {err.str()})", topic=topic, code=code)
    return Unacknowledged(f"{topic}: the broker did not acknowledge the record ({code}: {err.str()})",
                          topic=topic, code=code)


def timed_out(topic: str, waited_s: float) -> Unacknowledged:
    return Unacknowledged(f"{topic}: no acknowledgement from the broker within {waited_s:g}s (it may still write "
                          "the record); check REACH_BOOTSTRAP, then send again with the same idempotency key",
                          topic=topic, code="_MSG_TIMED_OUT")


class Outbound(NamedTuple):
    """One record to produce (a tuple: built once per envelope, ~0.3 µs against a frozen dataclass's ~2)."""

    topic: str
    value: bytes
    key: bytes | None = None
    headers: Headers | None = None
    partition: int | None = None


class Producing(Protocol):
    """The part of confluent_kafka.Producer used here (the memory bus's producer and test fakes fit it)."""

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *args: Any,
                **kwargs: Any) -> None: ...

    def poll(self, timeout: float = ..., /) -> int: ...

    def flush(self, timeout: float = ..., /) -> int: ...


def _produce(producer: Producing, record: Outbound, on_delivery: Any) -> bool:
    """Queue one record; False when librdkafka refused it before queueing (then `on_delivery` got the error)."""
    extra: dict[str, Any] = {} if record.partition is None else {"partition": record.partition}
    while True:
        try:
            producer.produce(record.topic, record.value, record.key, headers=record.headers,
                             on_delivery=on_delivery, **extra)
            return True
        except BufferError:  # the local queue is full: serve delivery reports, which frees it
            producer.poll(POLL_S)
        except KafkaException as exc:  # e.g. over message.max.bytes: refused before queueing
            on_delivery(exc.args[0] if exc.args else exc, None)
            return False


_PENDING: Any = object()


def deliver_all(producer: Producing, records: Sequence[Outbound], *, timeout_s: float) -> list[Outcome]:
    """Produce every record, then serve delivery reports until each one's is in (or `timeout_s` passed since the
    last was queued): per record, in order, None when acknowledged, else its ProduceError (`Unacknowledged` for
    one whose report did not come in time)."""
    outcomes: list[Any] = [_PENDING] * len(records)
    reported: deque[int] = deque()  # append is atomic: another thread polling this producer may serve a report

    def delivered(index: int, err: Any, _msg: Any) -> None:
        outcomes[index] = None if err is None else failure(records[index].topic, err)
        reported.append(index)

    for index, record in enumerate(records):
        _produce(producer, record, functools.partial(delivered, index))
    deadline = time.monotonic() + timeout_s
    while len(reported) < len(records):
        wait = deadline - time.monotonic()
        if wait <= 0:
            break
        producer.poll(min(wait, POLL_S))
    # a report that comes later (served by another poll of this producer) changes nothing in what is returned
    return [timed_out(records[i].topic, timeout_s) if o is _PENDING else o for i, o in enumerate(list(outcomes))]


class AsyncProducer:
    """A producer for asyncio callers: `await send(record)` returns once the broker acknowledged the record and
    raises its ProduceError otherwise.

    No thread: while any record awaits its acknowledgement, the event loop polls the producer every
    POLL_INTERVAL_S (a non-blocking `poll(0)` that serves every report librdkafka has queued, each resolving its
    caller's future on the spot), so a burst of concurrent sends shares librdkafka's batches and costs one wake-up
    per interval, not one per ack. Idle, nothing polls. One instance serves one event loop.

    librdkafka's message.timeout.ms bounds every wait: an unacknowledged record ends in a definite delivery error
    (Unacknowledged), never in a timer racing a late ack. `close()` / `aclose()` wait for what is queued, then end
    any call still waiting with Unacknowledged."""

    POLL_INTERVAL_S = 0.001

    def __init__(self, producer: Producing) -> None:
        self._producer = producer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._waiting: set[asyncio.Future[Outcome]] = set()
        self._outbox: list[tuple[Outbound, asyncio.Future[Outcome]]] = []  # produced once per loop iteration
        self._poller: asyncio.TimerHandle | None = None
        self._closed = False

    async def send(self, record: Outbound) -> None:
        """Produce `record` and wait for its acknowledgement: Refused / Unacknowledged when it was not written."""
        outcome = await self.deliver(record)
        if outcome is not None:
            raise outcome

    async def deliver(self, record: Outbound) -> Outcome:
        """Produce `record` and wait for its outcome (None: acknowledged)."""
        if self._closed:
            return Unacknowledged(f"{record.topic}: the producer is closed; nothing was sent", topic=record.topic,
                                  code="_DESTROY")
        loop = self._bind()
        ack: asyncio.Future[Outcome] = loop.create_future()
        self._outbox.append((record, ack))
        if len(self._outbox) == 1:
            loop.call_soon(self._produce_outbox)
        self._waiting.add(ack)
        try:
            return await ack
        finally:
            self._waiting.discard(ack)

    def _produce_outbox(self) -> None:
        """Produce what this loop iteration's sends queued, back to back (librdkafka then batches them without a
        wake-up of its threads per record); a full local queue: the rest once the poller has drained it."""
        outbox, self._outbox = self._outbox, []
        for index, (record, ack) in enumerate(outbox):
            if ack.done():  # its caller gave up (cancelled) before it was produced
                continue
            extra: dict[str, Any] = {} if record.partition is None else {"partition": record.partition}
            try:
                self._producer.produce(record.topic, record.value, record.key, headers=record.headers,
                                       on_delivery=functools.partial(self._delivered, ack, record.topic), **extra)
            except BufferError:
                self._outbox[:0] = outbox[index:]
                assert self._loop is not None
                self._loop.call_later(FULL_QUEUE_WAIT_S, self._produce_outbox)
                break
            except KafkaException as exc:  # refused before queueing (e.g. over message.max.bytes)
                _resolve(ack, failure(record.topic, exc))
        self._schedule()

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError("an AsyncProducer serves one event loop; make one per loop")
            self._loop, self._loop_thread, self._poller = loop, threading.get_ident(), None
        return loop

    def _schedule(self) -> None:
        if self._poller is None and self._loop is not None:
            self._poller = self._loop.call_later(self.POLL_INTERVAL_S, self._poll)

    def _poll(self) -> None:
        self._poller = None
        self._producer.poll(0)
        if self._waiting:
            self._schedule()

    def _delivered(self, ack: asyncio.Future[Outcome], topic: str, err: Any, _msg: Any) -> None:
        outcome = None if err is None else failure(topic, err)
        if threading.get_ident() == self._loop_thread:
            _resolve(ack, outcome)
        elif not ack.get_loop().is_closed():  # served by `close()` on another thread
            ack.get_loop().call_soon_threadsafe(_resolve, ack, outcome)

    async def aclose(self, timeout_s: float = 10.0) -> int:
        """On the loop: wait up to `timeout_s` for what is queued; the number of records left unacknowledged
        (their callers get Unacknowledged)."""
        self._closed = True
        deadline = time.monotonic() + timeout_s
        while self._waiting and time.monotonic() < deadline:
            self._producer.poll(0)
            await asyncio.sleep(0.005)
        return self._give_up()

    def close(self, timeout_s: float = 10.0) -> int:
        """From any thread once the loop no longer sends: flush up to `timeout_s`; the number of records left
        unacknowledged (their callers get Unacknowledged)."""
        self._closed = True
        self._producer.flush(timeout_s)
        return self._give_up()

    def _give_up(self) -> int:
        left = [ack for ack in list(self._waiting) if not ack.done()]
        for ack in left:
            gone = Unacknowledged("the producer closed before the broker acknowledged the record; send it again "
                                  "with the same idempotency key", topic="", code="_DESTROY")
            loop = ack.get_loop()
            if threading.get_ident() == self._loop_thread:
                _resolve(ack, gone)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, ack, gone)
        return len(left)


def _resolve(ack: asyncio.Future[Outcome], outcome: Outcome) -> None:
    if not ack.done():  # a waiter that gave up (cancelled) is skipped
        ack.set_result(outcome)
