"""The push sender's produce step over a fake producer: a task's notifications go to the webhook channel's topic
keyed by the task, each once across calls; an outage is retried; a refusal no retry cures is counted and skipped
(it never blocks the notifications behind it)."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import KafkaError

from reach.a2a import push
from reach.a2a.pushsender import PushSender
from reach.kafka import codec
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


class Producer:
    """Records what is produced; `fail` is the error the next flush reports for every record (then cleared)."""

    def __init__(self, fail: list[KafkaError | None]) -> None:
        self.fail = fail
        self.pending: list[Any] = []
        self.acked: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, *, key: bytes, value: bytes, on_delivery: Any) -> None:
        self.pending.append((topic, key, value, on_delivery))

    def flush(self, _timeout: float) -> int:
        error = self.fail.pop(0) if self.fail else None
        for topic, key, value, report in self.pending:
            report(error, None)
            if error is None:
                self.acked.append((topic, key, value))
        self.pending = []
        return 0


def sender() -> PushSender:
    made = PushSender(names=Names("reach"), kafka=KafkaSettings(), book=Book(TASK))  # type: ignore[arg-type]
    made._stop.wait = lambda _s=None: False  # type: ignore[method-assign]  # no pause between attempts
    return made


def test_each_notification_is_produced_once_to_the_webhook_topic_keyed_by_the_task() -> None:
    out, producer = sender(), Producer([])
    out._send(producer, [ROW])  # type: ignore[arg-type]
    out._send(producer, [ROW, {**ROW, "tenant": "globex"}])  # type: ignore[arg-type]  # again; another tenant's
    assert len(producer.acked) == len(push.notifications(ROW, TASK.configs[0])) == out.produced == 4
    assert {topic for topic, _, _ in producer.acked} == {"reach.cap.channel.webhook"}
    assert {key for _, key, _ in producer.acked} == {b"push:m1"}
    first = codec.decode(producer.acked[0][2], Envelope)
    assert json.loads(first.payload)["headers"] == {push.TOKEN_HEADER: "tk"}


def test_an_outage_is_retried_and_a_refusal_for_good_is_skipped() -> None:
    out, producer = sender(), Producer([KafkaError(KafkaError._MSG_TIMED_OUT), None])
    out._send(producer, [ROW])  # type: ignore[arg-type]
    assert len(producer.acked) == 4 and out.refused == 0
    too_big, refusing = sender(), Producer([KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)])
    too_big._send(refusing, [ROW])  # type: ignore[arg-type]  # returns: nothing retried, nothing blocked
    assert refusing.acked == [] and too_big.refused == 4
    too_big._send(refusing, [ROW])  # type: ignore[arg-type]
    assert refusing.acked == []  # counted as settled: not produced again
