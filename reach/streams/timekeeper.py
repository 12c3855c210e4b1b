"""The timekeeper's I/O: expire spent budgets, reroute envelopes nobody started (re-read from the inbox)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from reach import clients, codec
from reach.codec import DecodeError
from reach.envelopes import now_ms
from reach.names import Names
from reach.records import Envelope, ErrorInfo, Policy, Receipt, Status
from reach.retry import Action, Failure, Limits, after_failure
from reach.settings import KafkaSettings
from reach.status import StatusRow
from reach.timekeeper import Due, Task, due_tasks
from reach.topicreader import open_reader

log = logging.getLogger("reach.timekeeper")
Acked = Callable[[KafkaError | None, Message], None]
_MAX_MARKS = 100_000


class Timekeeper:
    """Acts on due rows once each (marks are remembered; a restart may act once more: receivers are idempotent)."""

    def __init__(self, *, names: Names, tiers: list[str], kafka: KafkaSettings | None = None,
                 policy: Callable[[str], Policy | None] = lambda _: None) -> None:
        self._policy = policy
        self.names = names
        self.tiers = tiers
        self._kafka = kafka or KafkaSettings()
        self._producer: Producer | None = None
        self._marks: set[tuple[str, int, int, str]] = set()
        self.expired = 0
        self.rerouted = 0

    def tick(self, rows: Iterable[StatusRow], now: int | None = None) -> int:
        """Handle every due row; blocking (run it in an executor). Returns how many were acted on."""
        tasks = [t for t in due_tasks(rows, now if now is not None else now_ms()) if t.mark not in self._marks]
        if not tasks:
            return 0
        producer = self._producer_()
        errors: list[KafkaError] = []

        def acked(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        for task in tasks:
            if task.due is Due.EXPIRE:
                self._expire(producer, task.row, acked)
            else:
                self._reroute(producer, task, acked)
        producer.flush(30)
        if errors:
            log.warning("timekeeper: %d record(s) refused (%s); will act again next tick", len(errors), errors[0])
            return 0
        if len(self._marks) > _MAX_MARKS:
            self._marks.clear()
        self._marks.update(t.mark for t in tasks)
        return len(tasks)

    def _expire(self, producer: Producer, row: StatusRow, acked: Acked) -> None:
        error = ErrorInfo(kind="BUDGET", code="DEADLINE_EXCEEDED",
                          message=f"the total budget ended at {row.deadline} while the message was {row.status}")
        self._receipt(producer, _receipt(row, Status.EXPIRED, error=error), acked)
        self.expired += 1

    def _reroute(self, producer: Producer, task: Task, acked: Acked) -> None:
        row = task.row
        raw = self._fetch(row.inbox) if row.inbox else None
        try:
            envelope = codec.decode(raw, Envelope) if raw is not None else None
        except DecodeError:
            envelope = None
        if raw is None or envelope is None:
            error = ErrorInfo(kind="DELIVERY", code="ENVELOPE_GONE",
                              message=f"delivery timed out and the envelope at {row.inbox} could not be re-read")
            self._receipt(producer, _receipt(row, Status.FAILED, error=error), acked)
            return
        late = ErrorInfo(kind="DELIVERY", code="DELIVERY_TIMEOUT",
                         message=f"{row.routed_instance} did not start it within {envelope.delivery_timeout_ms} ms")
        decided = after_failure(Failure.DELIVERY, envelope, error=late, names=self.names, tiers=self.tiers,
                                limits=Limits.resolve(envelope, self._policy(envelope.capability)), now_ms=now_ms(),
                                failed_instance=row.routed_instance, raw=raw, origin=row.inbox or ("", -1, -1))
        for record in decided.records:
            producer.produce(record.topic, record.value, key=record.key.encode(), headers=record.headers,
                             on_delivery=acked)
        if decided.action is Action.REROUTE:
            self.rerouted += 1
        elif decided.action is Action.EXPIRE:
            self.expired += 1

    def _fetch(self, inbox: tuple[str, int, int]) -> bytes | None:
        topic, partition, offset = inbox
        reader = open_reader("timekeeper", self._kafka)
        try:
            reader.assign([TopicPartition(topic, partition, offset)])
            for _ in range(20):
                for msg in clients.take(reader, 10, 0.25):
                    if not msg.error() and msg.offset() == offset:
                        return msg.value()
            return None
        finally:
            reader.close()

    def _receipt(self, producer: Producer, receipt: Receipt, acked: Acked) -> None:
        producer.produce(self.names.receipts, codec.encode(receipt), key=receipt.message_id.encode(),
                         on_delivery=acked)

    def _producer_(self) -> Producer:
        if self._producer is None:
            self._producer = clients.producer(self._kafka)
        return self._producer


def _receipt(row: StatusRow, status: Status, **fields: object) -> Receipt:
    return Receipt.model_validate({
        "message_id": row.message_id, "generation": row.generation, "trace_id": row.trace_id, "tenant": row.tenant,
        "capability": row.capability, "status": status, "attempt": row.attempt, "at": now_ms(),
        "deadline": row.deadline, "reroutes": row.reroutes, **fields,
    })
