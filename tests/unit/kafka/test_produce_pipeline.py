"""reach.kafka.pipeline over a fake producer: every record ends in its own outcome (acknowledged, refused,
unacknowledged), a batch waits once, and asyncio sends are served a poll at a time without a thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from reach.kafka import pipeline
from reach.kafka.pipeline import AsyncProducer, Outbound, Refused, Unacknowledged, deliver_all


class FakeProducer:
    """Queues delivery callbacks; `poll` serves every queued one. A value in `refuse_now` raises at produce (as
    librdkafka does over message.max.bytes), one in `errors` is reported with that error, one in `silent` never."""

    def __init__(self, *, full_once: bool = False) -> None:
        self.pending: list[tuple[Any, bytes]] = []
        self.errors: dict[bytes, KafkaError] = {}
        self.refuse_now: set[bytes] = set()
        self.silent: set[bytes] = set()
        self.polls: list[int] = []  # reports served per poll that served any
        self.full_once = full_once
        self.threads: set[str] = set()

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *args: Any,
                **kwargs: Any) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError("Local: Queue full")
        if value in self.refuse_now:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        if value not in self.silent:
            self.pending.append((kwargs["on_delivery"], value or b""))

    def poll(self, timeout: float = 0.0, /) -> int:
        self.threads.add(threading.current_thread().name)
        served, self.pending = self.pending, []
        if served:
            self.polls.append(len(served))
        for callback, value in served:
            callback(self.errors.get(value), None)
        return len(served)

    def flush(self, timeout: float = 0.0, /) -> int:
        self.poll(0)
        return 0


def _records(*values: bytes) -> list[Outbound]:
    return [Outbound("t.cap.a", v, b"k") for v in values]


def test_a_batch_reports_each_record_on_its_own() -> None:
    producer = FakeProducer(full_once=True)
    producer.errors = {b"big": KafkaError(KafkaError.MSG_SIZE_TOO_LARGE),
                       b"lost": KafkaError(KafkaError._MSG_TIMED_OUT),
                       b"nowhere": KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)}
    producer.refuse_now = {b"huge"}
    outcomes = deliver_all(producer, _records(b"a", b"big", b"b", b"lost", b"huge", b"nowhere", b"c"), timeout_s=5)
    assert [type(o).__name__ if o else None for o in outcomes] == [
        None, "Refused", None, "Unacknowledged", "Refused", "Refused", None]
    assert outcomes[1] is not None and outcomes[1].code == "MSG_SIZE_TOO_LARGE" and "t.cap.a" in str(outcomes[1])
    assert producer.polls == [6], "one poll served the whole batch (the seventh was refused at produce)"


def test_a_report_that_never_comes_is_unacknowledged_after_the_timeout() -> None:
    producer = FakeProducer()
    producer.silent = {b"gone"}
    ok, gone = deliver_all(producer, _records(b"ok", b"gone"), timeout_s=0.3)
    assert ok is None and isinstance(gone, Unacknowledged) and "within 0.3s" in str(gone)


def test_only_record_faults_count_as_the_records_own() -> None:
    size = pipeline.failure("t", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    topic = pipeline.failure("t", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    outage = pipeline.failure("t", KafkaError(KafkaError._TRANSPORT))
    assert isinstance(size, Refused) and size.code in pipeline.RECORD_FAULTS
    assert isinstance(topic, Refused) and topic.code not in pipeline.RECORD_FAULTS
    assert isinstance(outage, Unacknowledged)


def test_concurrent_async_sends_are_served_by_few_polls_on_the_loop() -> None:
    producer = FakeProducer()
    producer.errors = {b"big": KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)}
    sender = AsyncProducer(producer)

    async def main() -> list[Any]:
        sends = [sender.deliver(Outbound("t", str(i).encode())) for i in range(300)]
        return await asyncio.gather(*sends, sender.deliver(Outbound("t", b"big")))

    outcomes = asyncio.run(main())
    assert outcomes[:300] == [None] * 300 and isinstance(outcomes[300], Refused)
    assert sum(producer.polls) == 301 and len(producer.polls) < 10, producer.polls
    assert producer.threads == {threading.current_thread().name}, "polled on the loop's thread, no thread of its own"


def test_send_raises_and_close_ends_what_is_still_waiting() -> None:
    producer = FakeProducer()
    producer.errors = {b"big": KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)}
    producer.silent = {b"stuck"}
    producer.refuse_now = {b"huge"}
    sender = AsyncProducer(producer)

    async def main() -> None:
        with pytest.raises(Refused, match="MSG_SIZE_TOO_LARGE"):
            await sender.send(Outbound("t", b"big"))
        with pytest.raises(Refused):
            await sender.send(Outbound("t", b"huge"))
        stuck = asyncio.ensure_future(sender.deliver(Outbound("t", b"stuck")))
        await asyncio.sleep(0.01)
        assert await sender.aclose(0.05) == 1
        assert isinstance(await stuck, Unacknowledged)
        assert isinstance(await sender.deliver(Outbound("t", b"late")), Unacknowledged), "closed: nothing is sent"

    asyncio.run(main())
