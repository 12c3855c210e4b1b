"""The status fold's batch on in-memory fakes: a reply is acknowledged before anything commits past it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reach.kafka import codec
from reach.kafka import headers as H
from reach.kafka.codec import RegistryUnavailable
from reach.metrics import Metrics
from reach.names import Names
from reach.records import Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.status.fold import StatusFold
from reach.streams.status.ports import NoCallbacks
from reach.streams.status.store import PartitionStore
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer, fold_batch

NAMES = Names("ns")
OWNED = {(NAMES.receipts, p) for p in range(4)}  # what the group assigned this fold
REPLIES = NAMES.replies("c1")


class Producer(FakeProducer):
    """A FakeProducer whose metadata knows every topic (the fold checks a reply topic exists)."""

    def list_topics(self, topic: str, timeout: float = 0) -> Any:
        class Meta:
            error = None
            partitions = {0: object()}

        class Topics:
            topics = {topic: Meta()}

        return Topics()


def status_fold(tmp_path: Path) -> StatusFold:
    fold = StatusFold(names=NAMES, kafka=KafkaSettings(), metrics=Metrics(), state_dir=tmp_path, url="http://w1",
                      retention_ms=60_000, callbacks=NoCallbacks())
    fold.partitions = 1
    fold._stores[0] = PartitionStore(tmp_path / "p0")
    return fold


def receipt(offset: int, mid: str = "m1", status: Status = Status.COMPLETED, partition: int = 0) -> FakeMessage:
    value = codec.encode(Receipt(message_id=mid, trace_id="t1", tenant="d", capability="demo.echo", status=status,
                                 at=1_000 + offset, deadline=10**13, delivery_timeout_ms=60_000))
    return FakeMessage(NAMES.receipts, partition, offset, value, mid.encode(), [(H.REPLY_TO, REPLIES.encode())])


def replies_sent(fold: StatusFold, outcome: str) -> float:
    return cast(float, fold._metrics.registry.get_sample_value("agentreach_replies_total", {"outcome": outcome}))


def test_a_reply_refused_after_the_flush_rewinds_the_batch_and_is_sent_again(tmp_path: Path) -> None:
    fold, consumer = status_fold(tmp_path), FakeConsumer(assigned=OWNED)
    timed_out = Producer(refuse=lambda topic, _v: KafkaError(KafkaError._MSG_TIMED_OUT) if topic == REPLIES else None)
    fold_batch(fold, cast(Any, consumer), cast(Any, timed_out), cast(Any, [receipt(0), receipt(1, "m2")]))
    assert consumer.commits == [] and consumer.seeks == [TopicPartition(NAMES.receipts, 0, 0)]
    assert timed_out.to(NAMES.status) == [], "no changelog record says replied before the reply is acknowledged"
    assert fold.row("m1") is None

    healthy = Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, healthy), cast(Any, [receipt(0), receipt(1, "m2")]))
    assert len(healthy.to(REPLIES)) == 2 and consumer.committed_at() == {(NAMES.receipts, 0): 2}
    row = fold.row("m1")
    assert row is not None and row.replied and row.status is Status.COMPLETED


def test_a_reply_no_retry_cures_is_counted_and_the_batch_commits(tmp_path: Path) -> None:
    fold, consumer = status_fold(tmp_path), FakeConsumer(assigned=OWNED)
    too_large = Producer(refuse=lambda topic, _v: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if topic == REPLIES
                         else None)
    fold_batch(fold, cast(Any, consumer), cast(Any, too_large), cast(Any, [receipt(0)]))
    assert consumer.committed_at() == {(NAMES.receipts, 0): 1} and consumer.seeks == []
    assert replies_sent(fold, "failed") == 1
    row = fold.row("m1")
    assert row is not None and row.status is Status.COMPLETED


def test_a_synchronous_reply_error_is_counted_and_the_fold_moves_on(tmp_path: Path) -> None:
    fold, consumer = status_fold(tmp_path), FakeConsumer(assigned=OWNED)
    raising = Producer(raise_on=lambda topic, _v: KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
                       if topic == REPLIES else None)
    fold_batch(fold, cast(Any, consumer), cast(Any, raising), cast(Any, [receipt(0), receipt(1, "m2")]))
    assert consumer.committed_at() == {(NAMES.receipts, 0): 2}
    assert replies_sent(fold, "failed") == 2 and len(raising.to(NAMES.status)) == 2
    assert fold.row("m2") is not None


def test_a_registry_outage_is_not_a_skipped_receipt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outage holds each partition from its first receipt that could not be read; what came before is folded
    and committed, nothing is counted undecodable, and the held receipts are read again after a pause."""
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    good, second = receipt(0), receipt(1, "m2")
    later = receipt(5, "m3", partition=1)  # another partition, behind the outage: held too

    class Registry:  # receipts framed by a Schema Registry that stops answering after the first
        def decode_dict(self, name: str, data: bytes) -> dict[str, Any]:
            if data != good.value():
                raise RegistryUnavailable("the registry did not answer")
            return codec.default_codec().decode_dict(name, data)

    monkeypatch.setattr(codec, "_wire", Registry())
    fold._stores[1] = PartitionStore(tmp_path / "p1")
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [good, second, later]))
    assert consumer.committed_at() == {(NAMES.receipts, 0): 1}, "committed up to the receipt the registry failed"
    assert sorted((tp.partition, tp.offset) for tp in consumer.seeks) == [(0, 1), (1, 5)]
    assert sorted((tp.partition, tp.offset) for tp in consumer.paused) == [(0, -1001), (1, -1001)]
    assert fold.row("m1") is not None and fold.row("m2") is None and fold.row("m3") is None
    assert fold._metrics.registry.get_sample_value("agentreach_undecodable_receipts_total") == 0


def test_a_due_row_waits_until_the_fold_has_read_its_partition_past_the_due_time(tmp_path: Path) -> None:
    """A lagging fold may not have folded the STARTED that closes a ROUTED row: the timekeeper gets the row only
    once the partition's frontier (everything appended before it is folded) passes the row's due time."""
    fold = status_fold(tmp_path)
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, Producer()),
                cast(Any, [receipt(0, "m1", Status.ROUTED)]))
    due_at = 1_000 + 60_000  # ROUTED at 1,000 with a 60 s delivery timeout
    assert fold.due_rows(10**12) == []  # nothing known to be folded yet
    fold.frontier[0] = due_at - 1
    assert fold.due_rows(10**12) == []
    fold.frontier[0] = due_at
    assert [r.message_id for r in fold.due_rows(10**12)] == ["m1"]
    assert fold.due_rows(due_at - 1) == []  # and never before it is due


class Level(FakeConsumer):
    """Positions and the high watermarks of the last fetch response (what `cached=True` answers)."""

    def __init__(self, positions: dict[int, int], highs: dict[int, int]) -> None:
        super().__init__()
        self.positions, self.highs = positions, highs

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001)) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> tuple[int, int]:
        assert cached, "a local call: the fold checks after every batch"
        return 0, self.highs.get(tp.partition, -1001)


def test_a_partition_is_level_when_read_to_its_last_fetched_high_watermark_or_has_nothing_new(tmp_path: Path) -> None:
    fold = status_fold(tmp_path)
    for p in (1, 2, 3):
        fold._stores[p] = PartitionStore(tmp_path / f"p{p}")
    fold._start_offsets = {2: 7, 3: 5}
    consumer = Level(positions={0: 10, 1: 9}, highs={0: 10, 1: 10, 2: 7, 3: 8})
    # 0 read to its high; 1 behind; 2 nothing read since it began at its high; 3 began below its high
    assert sorted(fold._level(cast(Any, consumer))) == [0, 2]
    assert fold._level(cast(Any, Level(positions={0: 10}, highs={}))) == []  # no fetch answered yet


def test_a_batch_with_several_receipts_of_one_message_writes_one_row_change(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    steps = [receipt(0, "m1", Status.ROUTED), receipt(1, "m1", Status.STARTED), receipt(2, "m2", Status.STARTED),
             receipt(3, "m1", Status.COMPLETED)]
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, steps))
    changes = [json.loads(v) for v in producer.to(NAMES.status)]
    assert sorted((c["message_id"], c["status"]) for c in changes) == [("m1", "COMPLETED"), ("m2", "STARTED")]
    row = fold.row("m1")
    assert row is not None and [s.status for s in row.timeline] == [Status.ROUTED, Status.STARTED, Status.COMPLETED]


def test_the_fold_counts_receipts_with_labelled_children_kept_across_batches(tmp_path: Path) -> None:
    fold, consumer = status_fold(tmp_path), FakeConsumer(assigned=OWNED)
    fold_batch(fold, cast(Any, consumer), cast(Any, Producer()), cast(Any, [receipt(0, "m1", Status.STARTED)]))
    fold_batch(fold, cast(Any, consumer), cast(Any, Producer()), cast(Any, [receipt(1, "m2", Status.STARTED),
                                                                      receipt(2, "m2", Status.STARTED)]))
    sample = fold._metrics.registry.get_sample_value
    assert sample("agentreach_receipts_total", {"capability": "demo.echo", "status": "STARTED"}) == 3


def test_retention_tombstones_old_terminal_rows_while_receipts_keep_coming(tmp_path: Path) -> None:
    """The sweep is not left to idle moments: a fold that always has a batch still forgets rows past retention."""
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    fold_batch(fold, consumer, producer, [receipt(0, "old", Status.COMPLETED)])  # ended at 1,000 ms: long past
    assert fold.row("old") is not None
    fold._next_sweep = 0.0  # the sweep is due
    fold_batch(fold, consumer, producer, [receipt(1, "new", Status.STARTED)])
    assert fold.row("old") is None and fold.row("new") is not None
    assert (NAMES.status, None, b"old") in producer.sent, "its tombstone went to the changelog first"
    assert consumer.committed_at() == {(NAMES.receipts, 0): 2}
