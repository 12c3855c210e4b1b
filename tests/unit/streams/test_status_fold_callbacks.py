"""The status fold's callbacks on in-memory fakes: produced inside the batch, before anything commits past it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, TopicPartition

from reach.channels.closure import ChannelCallbacks
from reach.channels.spec import callback_text
from reach.kafka import codec
from reach.metrics import Metrics
from reach.names import Names
from reach.records import Envelope, Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError
from reach.streams.status.fold import StatusFold
from reach.streams.status.store import PartitionStore
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer, fold_batch

NAMES = Names("ns")
OWNED = {(NAMES.receipts, p) for p in range(4)}  # what the group assigned this fold
WEBHOOK = NAMES.capability("channel.webhook")
SPEC = callback_text("webhook:https://example.com/hook", "$.a")


@dataclass
class Producer(FakeProducer):
    """A FakeProducer whose metadata knows the topics in `known` (all when None); `metadata_error` is the
    topic-level error code of any other answer (a broker without a leader for it, say)."""

    known: set[str] | None = None
    metadata_error: int | None = None
    lookups: int = 0

    def list_topics(self, topic: str, timeout: float = 0) -> Any:
        self.lookups += 1
        exists = self.known is None or topic in self.known
        code = self.metadata_error if self.metadata_error is not None else KafkaError.UNKNOWN_TOPIC_OR_PART

        class Meta:
            error = None if exists else KafkaError(code)
            partitions = {0: object()} if exists else {}

        class Topics:
            topics = {topic: Meta()}

        return Topics()


def status_fold(tmp_path: Path) -> StatusFold:
    fold = StatusFold(names=NAMES, kafka=KafkaSettings(), metrics=Metrics(), state_dir=tmp_path, url="http://w1",
                      retention_ms=60_000, callbacks=ChannelCallbacks())
    fold.partitions = 1
    fold._stores[0] = PartitionStore(tmp_path / "p0")
    return fold


def receipt(offset: int, status: Status, callback: str | None = SPEC, mid: str = "m1") -> FakeMessage:
    value = codec.encode(Receipt(message_id=mid, trace_id="t1", tenant="d", capability="demo.echo", status=status,
                                 at=1_000 + offset, result=b'{"a": 1}' if status.is_terminal else None,
                                 callback=callback))
    return FakeMessage(NAMES.receipts, 0, offset, value, mid.encode(), [])


def test_the_callback_envelope_goes_to_the_channel_topic_before_the_commit(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(0, Status.STARTED),
                                                                     receipt(1, Status.COMPLETED)]))
    sent = [codec.decode(v, Envelope) for v in producer.to(WEBHOOK)]
    assert [e.message_id for e in sent] == ["m1-cb0"] and sent[0].parent_id == "m1"
    assert consumer.committed_at() == {(NAMES.receipts, 0): 2}
    row = fold.row("m1")
    assert row is not None and row.callback_sent
    assert fold._metrics.registry.get_sample_value("agentreach_callbacks_total", {"outcome": "sent"}) == 1

    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(2, Status.COMPLETED)]))
    assert len(producer.to(WEBHOOK)) == 1, "a later terminal receipt does not call back twice"


def test_a_callback_refused_after_the_flush_rewinds_the_batch(tmp_path: Path) -> None:
    fold, consumer = status_fold(tmp_path), FakeConsumer(assigned=OWNED)
    refusing = Producer(refuse=lambda topic, _v: KafkaError(KafkaError._MSG_TIMED_OUT) if topic == WEBHOOK else None)
    fold_batch(fold, cast(Any, consumer), cast(Any, refusing), cast(Any, [receipt(0, Status.COMPLETED)]))
    assert consumer.commits == [] and consumer.seeks == [TopicPartition(NAMES.receipts, 0, 0)]
    assert fold.row("m1") is None and refusing.to(NAMES.status) == []

    healthy = Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, healthy), cast(Any, [receipt(0, Status.COMPLETED)]))
    assert len(healthy.to(WEBHOOK)) == 1 and consumer.committed_at() == {(NAMES.receipts, 0): 1}


def test_no_channel_topic_gives_an_unroutable_receipt_and_a_bad_spec_a_rejected_one(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer(known=set())
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(0, Status.COMPLETED)]))
    out = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert [(r.message_id, r.status) for r in out] == [("m1-cb0", Status.UNROUTABLE)]
    assert out[0].error is not None and "reach channels run --channel webhook" in out[0].error.message
    assert producer.to(WEBHOOK) == []
    assert fold._metrics.registry.get_sample_value("agentreach_callbacks_total", {"outcome": "no_channel"}) == 1

    fold2, producer2 = status_fold(tmp_path / "b"), Producer()
    fold_batch(fold2, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer2),
                 cast(Any, [receipt(0, Status.COMPLETED, callback="webhook:not a url")]))
    bad = [codec.decode(v, Receipt) for v in producer2.to(NAMES.receipts)]
    assert [(r.message_id, r.status) for r in bad] == [("m1-cb0", Status.REJECTED)]
    assert bad[0].error is not None and bad[0].error.code == "BAD_CALLBACK"
    assert fold2._metrics.registry.get_sample_value("agentreach_callbacks_total", {"outcome": "rejected"}) == 1


def test_a_missing_channel_topic_is_not_remembered(tmp_path: Path) -> None:
    fold, producer = status_fold(tmp_path), Producer(known=set())
    fold_batch(fold, FakeConsumer(assigned=OWNED), producer, [receipt(0, Status.COMPLETED)])
    assert producer.to(WEBHOOK) == []
    producer.known = {WEBHOOK}  # the channel agent started: the next callback goes to it at once
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer),
                cast(Any, [receipt(1, Status.FAILED, mid="m2")]))
    assert [codec.decode(v, Envelope).message_id for v in producer.to(WEBHOOK)] == ["m2-cb0"]


def test_any_other_metadata_error_is_infrastructure_and_commits_nothing(tmp_path: Path) -> None:
    fold, consumer = status_fold(tmp_path), FakeConsumer(assigned=OWNED)
    sick = Producer(known=set(), metadata_error=KafkaError.LEADER_NOT_AVAILABLE)
    with pytest.raises(StreamsError, match="read again"):
        fold_batch(fold, cast(Any, consumer), cast(Any, sick), cast(Any, [receipt(0, Status.COMPLETED)]))
    assert consumer.commits == [] and sick.to(NAMES.receipts) == [] and fold.row("m1") is None

    healthy = Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, healthy), cast(Any, [receipt(0, Status.COMPLETED)]))
    assert len(healthy.to(WEBHOOK)) == 1 and consumer.committed_at() == {(NAMES.receipts, 0): 1}
    fold_batch(fold, cast(Any, consumer), cast(Any, healthy), cast(Any, [receipt(1, Status.STARTED)]))
    assert healthy.lookups == 1, "a topic seen to exist is cached"
