"""The batch worker (reach.kafka.worker) on the real broker: an input is committed only after its output is
acknowledged, and a record whose output failed to produce is read again and delivered once it can be."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from reach.kafka import clients
from reach.kafka.backoff import TopicPart
from reach.kafka.worker import Output, Record, Subscription, Worker, WorkerMetrics
from reach.settings import KafkaSettings
from tests.integration.conftest import Infra


class Rewinds(WorkerMetrics):
    """Counts the worker's rewinds: each one is a batch whose forwards were not acknowledged."""

    def __init__(self) -> None:
        self.count = 0

    def rewound(self, worker: str, tp: TopicPart, offset: int, delay_s: float) -> None:
        self.count += 1


class Forward(Worker[bytes]):
    """Forwards each record to `target`; a record whose forward fails is not dead-lettered: it is read again."""

    backoff_first_s = 0.05

    def __init__(self, kafka: KafkaSettings, subscription: Subscription, target: str,
                 metrics: Sequence[WorkerMetrics] = ()) -> None:
        super().__init__(kafka=kafka, subscription=subscription, metrics=metrics)
        self.target = target

    def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
        return [Output(self.target, r.raw, key=r.key, cause=r.position) for r in records]

    def failed(self, record: Record[bytes], error: BaseException) -> Iterable[Output]:
        raise RuntimeError(f"keep {record!r}: {error}")


def test_commit_only_after_ack_and_read_again_after_a_failed_produce(infra: Infra) -> None:
    kafka = KafkaSettings.model_construct(bootstrap=infra.bootstrap)
    run = uuid.uuid4().hex[:10]
    source, target, group = f"worker.in.{run}", f"worker.out.{run}", f"worker.{run}"
    admin = clients.admin(kafka)
    admin.create_topics([NewTopic(source, num_partitions=2, replication_factor=1)])[source].result(30)
    producer = clients.producer(kafka)
    for n in range(20):
        producer.produce(source, value=b"v%d" % n, key=b"k%d" % n)
    assert producer.flush(30) == 0

    sub = Subscription(group=group, topics=[source], consumer_config={"auto.offset.reset": "earliest"},
                       producer_config={"topic.metadata.propagation.max.ms": 1_000,
                                        "topic.metadata.refresh.interval.ms": 1_000}, flush_s=10)
    reader = clients.consumer(group, kafka)  # never subscribes: it only asks what the group committed
    parts = [TopicPartition(source, p) for p in range(2)]

    def committed() -> int:
        return sum(max(tp.offset, 0) for tp in reader.committed(parts, timeout=10))

    rewinds = Rewinds()
    with Forward(kafka, sub, target, metrics=[rewinds]) as worker:
        assert worker.wait_ready(30)
        deadline = time.monotonic() + 60
        while rewinds.count < 3:  # the target topic does not exist: every forward fails, the batch is read again
            assert time.monotonic() < deadline, f"{rewinds.count} rewinds in 60 s while every forward fails"
            time.sleep(0.1)
        assert committed() == 0, "nothing committed while no output was acknowledged"
        admin.create_topics([NewTopic(target, num_partitions=1, replication_factor=1)])[target].result(30)
        deadline = time.monotonic() + 60
        while committed() < 20:
            assert time.monotonic() < deadline, f"only {committed()} of 20 committed 60 s after the topic appeared"
            time.sleep(0.2)
    out = clients.consumer(f"{group}.out", kafka)
    out.assign([TopicPartition(target, 0, 0)])
    values: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        values.update(m.value() or b"" for m in out.consume(100, 0.5) if not m.error())
    out.close()
    reader.close()
    assert values == {b"v%d" % n for n in range(20)}, "every record delivered once the topic could take it"
