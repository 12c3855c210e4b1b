"""The push sender's decisions on the worker's seam (handle / owed / acknowledged, no Kafka): a task's notifications go
to the webhook channel's topic keyed by the task, each caused by its changelog record and sent once across batches;
what the broker did not acknowledge is owed again; a refusal no retry cures is counted and settled."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from reach.a2a import push, pushsender
from reach.a2a.pushsender import PushSender
from reach.kafka import clients, codec, memory
from reach.kafka.worker import Delivered, Output, Record, Refused
from reach.names import Names
from reach.records import Envelope
from reach.settings import KafkaSettings

ROW = {"message_id": "m1", "trace_id": "t1", "tenant": "acme", "status": "COMPLETED", "result": '{"ok": true}',
       "timeline": [{"status": s, "attempt": 1, "generation": 0, "at": i}
                    for i, s in enumerate(("ACCEPTED", "ROUTED", "STARTED", "COMPLETED"))]}
TASK = push.TaskPush(task_id="m1", tenant="acme", configs=(push.PushConfig(id="c1", url="https://r.example/a2a",
                                                                           token="tk"),))


class Book:
    def __init__(self, task: push.TaskPush) -> None:
        self.task = task

    def get(self, task_id: str) -> push.TaskPush | None:
        return self.task if task_id == self.task.task_id else None

    def listen(self, offers: Any) -> None:
        return None

    def sync(self, timeout: float = 10.0) -> None:
        return None

    def on_change(self, changed: Any) -> None:
        return None

    def expire(self, task_id: str) -> None:
        return None

    def sweep(self, now_ms: int) -> int:
        return 0


class Msg:
    """A changelog record as the consumer hands it over."""

    def __init__(self, value: bytes | None, offset: int = 0) -> None:
        self._value, self._offset = value, offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return None

    def headers(self) -> None:
        return None

    def topic(self) -> str:
        return "reach.status"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def records(*rows: dict[str, Any] | bytes | None, first: int = 0) -> list[Record[bytes]]:
    """Changelog records of `rows` (a dict as JSON, bytes as they are), decoded as the worker hands them over."""
    out = []
    for n, row in enumerate(rows):
        raw = json.dumps(row).encode() if isinstance(row, dict) else row
        record: Record[bytes] = Record(Msg(raw, first + n))  # type: ignore[arg-type]
        record.value = raw
        out.append(record)
    return out


def sender(book: Any = None, kafka: KafkaSettings | None = None) -> PushSender:
    return PushSender(names=Names("reach"), kafka=kafka or KafkaSettings(), book=book or Book(TASK))


def batch(out: PushSender, recs: list[Record[bytes]], *, ack: bool = True) -> list[Output]:
    """One turn of the worker: the batch's outputs and the owed ones, acknowledged (or not)."""
    outputs = [*out.handle(recs), *out.owed()] if recs else list(out.owed())
    out.acknowledged([Delivered(o, 0, n) for n, o in enumerate(outputs)] if ack else [])
    return outputs


def test_each_notification_is_produced_once_to_the_webhook_topic_keyed_by_the_task_caused_by_its_row() -> None:
    out = sender()
    first = batch(out, records(ROW))
    again = batch(out, records(ROW, {**ROW, "tenant": "globex"}, first=1))  # the same row again; another tenant's
    assert len(first) == len(push.notifications(ROW, TASK.configs[0])) == out.produced == 4 and again == []
    assert {o.topic for o in first} == {"reach.cap.channel.webhook"} and {o.key for o in first} == {b"push:m1"}
    assert {o.cause for o in first} == {("reach.status", 0, 0)}, "committed only once they are acknowledged"
    envelope = codec.decode(first[0].value, Envelope)
    assert json.loads(envelope.payload)["headers"] == {push.TOKEN_HEADER: "tk"}


def test_what_was_not_acknowledged_is_produced_again_when_its_record_is_read_again() -> None:
    out = sender()
    assert len(batch(out, records(ROW), ack=False)) == 4 and out.produced == 0  # an outage: the worker rewinds
    assert len(batch(out, records(ROW))) == 4 and out.produced == 4
    assert batch(out, records(ROW)) == []


def test_a_refusal_for_good_is_counted_and_passed_over() -> None:
    out = sender()
    [record] = records(ROW)
    assert list(out.failed(record, Refused(record, ["too large"] * 4))) == []  # the worker's call: nothing stands in
    assert out.refused == 4 and out.skipped == 0
    assert list(out.failed(record, ValueError("bad"))) == [] and out.skipped == 1


def test_the_sender_runs_on_the_worker_and_commits_a_row_once_its_notifications_are_acknowledged() -> None:
    name = f"push-{uuid.uuid4().hex[:8]}"
    bus, names = memory.bus(name), Names("reach")
    webhook = names.capability(push.WEBHOOK)
    bus.create_topic(names.status, 1)
    bus.create_topic(webhook, 1)
    bus.commit(pushsender.group(names), {(names.status, 0): 0})  # a group that has read nothing yet
    kafka = KafkaSettings(bootstrap=memory.SCHEME + name)
    try:
        producer = clients.producer(kafka)
        producer.produce(names.status, json.dumps(ROW).encode(), key=b"m1")
        producer.flush(1)
        deadline = time.monotonic() + 10
        with sender(kafka=kafka) as out:
            while bus.committed(pushsender.group(names), (names.status, 0)) < 1:
                assert time.monotonic() < deadline, "the row is committed once its notifications are acknowledged"
                time.sleep(0.01)
        assert out.produced == 4 and bus.watermarks((webhook, 0)) == (0, 4)
    finally:
        memory.forget(name)
