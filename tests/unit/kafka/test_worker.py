"""The batch worker (reach.kafka.worker) on the in-memory bus: decode once, per-record isolation, commit only what
was acknowledged, rewind and resume a partition whose outputs failed, skip before decoding, restart."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reach.kafka import clients, codec, memory
from reach.kafka.worker import BatchStats, Output, Record, Refused, Subscription, Worker, WorkerMetrics
from reach.records import Receipt, Status
from reach.settings import KafkaSettings


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"unit-{uuid.uuid4().hex[:8]}"
    bus = memory.bus(name)
    for topic, partitions in (("in", 2), ("out", 1), ("dead", 1)):
        bus.create_topic(topic, partitions)
    yield KafkaSettings(bootstrap=memory.SCHEME + name)
    memory.forget(name)


def _send(kafka: KafkaSettings, values: Iterable[bytes], *, key: Callable[[int], bytes] = lambda i: b"k%d" % (i % 5),
          headers: Callable[[int], Any] = lambda _i: None) -> None:
    producer = clients.producer(kafka)
    for i, value in enumerate(values):
        producer.produce("in", value=value, key=key(i), headers=headers(i))
    producer.flush(1)


def _read(kafka: KafkaSettings, topic: str) -> list[bytes]:
    reader = clients.consumer(f"r-{uuid.uuid4().hex[:6]}", kafka)
    parts = memory.bus(memory.bus_name(kafka.admin()) or "").partitions(topic)
    reader.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    return [m.value() or b"" for m in reader.consume(10_000, 0.05)]


def _committed(kafka: KafkaSettings, group: str = "g") -> int:
    bus = memory.bus(memory.bus_name(kafka.admin()) or "")
    return sum(max(bus.committed(group, ("in", p)), 0) for p in range(2))


def _until(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


class Echo(Worker[bytes]):
    """Forwards every value to `out` upper-cased; values starting with b"boom" raise; failures go to `dead`."""

    thread_name = "test-echo"

    def __init__(self, kafka: KafkaSettings, **sub: Any) -> None:
        super().__init__(kafka=kafka, subscription=Subscription(group="g", topics=["in"], **sub))
        self.batches: list[int] = []
        self.errors: list[BaseException] = []
        self.fail_hook = False

    def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
        self.batches.append(len(records))
        out = []
        for r in records:
            assert r.value is not None
            if r.value.startswith(b"boom"):
                raise ValueError(f"bad value {r.value!r}")
            out.append(Output(r.value.startswith(b"to:") and r.value[3:].decode() or "out", r.value.upper(),
                              key=r.key, cause=r.position))
        return out

    def failed(self, record: Record[bytes], error: BaseException) -> Iterable[Output]:
        self.errors.append(error)
        if self.fail_hook:
            raise RuntimeError("the dead letter cannot be written")
        return [Output("dead", record.raw, headers=[("why", type(error).__name__)])]


def test_every_record_is_produced_and_committed_after_its_output_is_acknowledged(kafka: KafkaSettings) -> None:
    _send(kafka, [b"v%d" % i for i in range(40)])
    with Echo(kafka) as worker:
        _until(lambda: _committed(kafka) == 40, "all 40 committed")
    assert sorted(_read(kafka, "out")) == sorted(b"V%d" % i for i in range(40))
    assert sum(worker.batches) == 40 and len(worker.batches) < 40, "handled in batches"


def test_a_record_that_raises_goes_to_the_failed_hook_and_the_others_are_handled(kafka: KafkaSettings) -> None:
    _send(kafka, [b"a", b"boom1", b"b", b"c", b"boom2", b"d"], key=lambda _i: b"same")
    with Echo(kafka):
        _until(lambda: _committed(kafka) == 6, "all 6 committed")
    assert _read(kafka, "out") == [b"A", b"B", b"C", b"D"], "in order, the failing ones left out"
    assert _read(kafka, "dead") == [b"boom1", b"boom2"]


def test_an_output_refused_for_good_sends_its_record_to_the_failed_hook(kafka: KafkaSettings) -> None:
    _send(kafka, [b"ok", b"to:nosuchtopic", b"ok2"], key=lambda _i: b"same")
    with Echo(kafka) as worker:
        _until(lambda: _committed(kafka) == 3, "all 3 committed")
    assert [type(e) for e in worker.errors] == [Refused]
    assert _read(kafka, "out") == [b"OK", b"OK2"]
    assert _read(kafka, "dead") == [b"to:nosuchtopic"]


def test_a_record_that_cannot_be_dead_lettered_holds_its_partition_and_is_read_again(kafka: KafkaSettings) -> None:
    _send(kafka, [b"a", b"boom", b"b"], key=lambda _i: b"same")
    rewinds: list[tuple[Any, int]] = []

    class Rewinds(WorkerMetrics):
        def rewound(self, worker: str, tp: Any, offset: int, delay_s: float) -> None:
            rewinds.append((tp, offset))

    worker = Echo(kafka)
    worker.metrics.append(Rewinds())
    worker.fail_hook = True
    with worker:
        _until(lambda: len(rewinds) >= 2, "read again after its backoff")
        assert _committed(kafka) == 1, "committed up to the record whose dead letter failed, not past it"
        worker.fail_hook = False
        _until(lambda: _committed(kafka) == 3, "committed once the dead letter is written")
    assert rewinds[0][1] == 1
    assert _read(kafka, "dead") == [b"boom"]
    assert _read(kafka, "out")[:1] == [b"A"] and _read(kafka, "out")[-1] == b"B"


def test_values_are_decoded_once_by_record_type_and_bad_bytes_go_to_the_failed_hook(kafka: KafkaSettings) -> None:
    receipt = Receipt(message_id="m1", trace_id="t", tenant="acme", capability="echo", status=Status.COMPLETED, at=1)
    seen: list[Any] = []
    failures: list[BaseException] = []

    class Reader(Worker[Receipt]):
        def handle(self, records: list[Record[Receipt]]) -> Iterable[Output]:
            seen.extend(r.value for r in records)
            return ()

        def failed(self, record: Record[Receipt], error: BaseException) -> Iterable[Output]:
            failures.append(error)
            return ()

    _send(kafka, [codec.encode(receipt), b"not avro"], key=lambda _i: b"same")
    with Reader(kafka=kafka, subscription=Subscription(group="g", topics=["in"], decode=Receipt)):
        _until(lambda: _committed(kafka) == 2, "both committed")
    assert [r.message_id for r in seen] == ["m1"] and isinstance(seen[0], Receipt)
    assert len(failures) == 1 and isinstance(failures[0], codec.DecodeError)


def test_skip_runs_on_headers_before_decoding(kafka: KafkaSettings) -> None:
    decoded: list[bytes] = []

    def decode(data: bytes) -> bytes:
        decoded.append(data)
        return data

    class Reader(Worker[bytes]):
        def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
            return ()

    sub = Subscription(group="g", topics=["in"], decode=decode,
                       skip=lambda r: ("x-skip", b"1") in r.headers)
    _send(kafka, [b"a", b"b", b"c"], headers=lambda i: [("x-skip", b"1")] if i == 1 else None)
    with Reader(kafka=kafka, subscription=sub):
        _until(lambda: _committed(kafka) == 3, "all 3 committed, the skipped one too")
    assert sorted(decoded) == [b"a", b"c"]


def test_a_batch_output_without_a_cause_holds_every_partition_of_the_batch(kafka: KafkaSettings) -> None:
    stats: list[BatchStats] = []

    class Count(WorkerMetrics):
        def batch(self, worker: str, s: BatchStats) -> None:
            stats.append(s)

    class Summary(Worker[bytes]):
        topic = "nosuchtopic"

        def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
            return [Output(self.topic, b"%d" % len(records))]

        def failed(self, record: Record[bytes], error: BaseException) -> Iterable[Output]:
            raise RuntimeError("no dead letters here")

    _send(kafka, [b"v%d" % i for i in range(10)])
    worker = Summary(kafka=kafka, subscription=Subscription(group="g", topics=["in"]), metrics=[Count()])
    with worker:
        _until(lambda: any(s.rewound == 2 for s in stats), "both partitions rewound")
        assert _committed(kafka) == 0
        worker.topic = "out"
        _until(lambda: _committed(kafka) == 10, "committed once the summary is acknowledged")


def test_an_infrastructure_error_restarts_the_loop_without_committing_the_batch(kafka: KafkaSettings) -> None:
    class Flaky(Worker[bytes]):
        backoff_first_s = 0.01
        calls = 0

        def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker gone"))
            return [Output("out", r.value, cause=r.position) for r in records]

    _send(kafka, [b"v%d" % i for i in range(6)], key=lambda _i: b"same")
    with Flaky(kafka=kafka, subscription=Subscription(group="g", topics=["in"])) as worker:
        _until(lambda: _committed(kafka) == 6, "all committed after the restart")
        assert worker.healthy()
    assert sorted(_read(kafka, "out")) == sorted(b"v%d" % i for i in range(6)), "each once: nothing was produced"


def test_a_batch_window_fills_the_batch(kafka: KafkaSettings) -> None:
    consumer = clients.consumer("w", kafka)
    consumer.assign([TopicPartition("in", p, 0) for p in range(2)])
    _send(kafka, [b"a"])
    producer = clients.producer(kafka)

    def later() -> None:
        time.sleep(0.05)
        producer.produce("in", value=b"b", key=b"k")

    import threading

    threading.Thread(target=later).start()
    got = clients.take(consumer, 2, 1.0, window_s=2.0)
    assert [m.value() for m in got] == [b"a", b"b"], "the window waited for the second record"
    assert clients.take(consumer, 2, 0.01) == []


def test_a_rebalance_commits_what_was_acknowledged_and_the_new_owner_reads_on_from_there(kafka: KafkaSettings) -> None:
    first = Echo(kafka, commit_every_s=3600.0)  # after its first commit, only the revoke's final commit can land
    with first:
        _send(kafka, [b"v%d" % i for i in range(10)], key=lambda _i: b"same")
        _until(lambda: _committed(kafka) == 10, "the first commit")
        _send(kafka, [b"v%d" % i for i in range(10, 20)], key=lambda _i: b"same")
        _until(lambda: sum(first.batches) == 20, "the first worker handled all 20")
        assert _committed(kafka) == 10, "the second commit waits for the timer"
        with Echo(kafka):  # joining rebalances the group: the first worker's partitions are revoked inside its poll
            _until(lambda: _committed(kafka) == 20, "the revoke's final commit landed")
            _send(kafka, [b"w%d" % i for i in range(10)])
            _until(lambda: len(_read(kafka, "out")) >= 30, "the group reads on", timeout=15)
    assert _committed(kafka) == 30, "each worker's final commit when it stops"
    assert sorted(_read(kafka, "out")) == sorted([b"V%d" % i for i in range(20)] + [b"W%d" % i for i in range(10)]), \
        "each record forwarded once: the new owner started from the final commit"


class Chain(Worker[bytes]):
    """Forwards each value to `out`; the forward's delivery report names where it landed in a follow-up to `dead`
    (the router's ROUTED receipt naming its forward's offset). A value b"note:" names a missing follow-up topic."""

    thread_name = "test-chain"
    note_topic = "dead"

    def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
        return [Output("out", r.value, key=r.key, cause=r.position, then=self._note(r.value or b""))
                for r in records]

    def _note(self, value: bytes) -> Callable[[int, int], list[Output]]:
        return lambda p, o: [Output(self.note_topic, b"%s@%d:%d" % (value, p, o))]


def test_a_follow_up_from_a_delivery_report_is_produced_in_the_same_flush_and_holds_its_cause(
        kafka: KafkaSettings) -> None:
    flushes = 0

    class Counting(Chain):
        pass

    worker = Counting(kafka=kafka, subscription=Subscription(group="g", topics=["in"]))
    _send(kafka, [b"a", b"b", b"c"], key=lambda _i: b"same")
    consumer = clients.consumer("g", kafka)
    consumer.assign([TopicPartition("in", p, 0) for p in range(2)])
    messages = clients.take(consumer, 10, 1.0)
    producer = clients.producer(kafka)
    real_flush = producer.flush

    def flush(timeout: float = -1) -> int:
        nonlocal flushes
        flushes += 1
        return real_flush(timeout)

    producer.flush = flush  # type: ignore[method-assign]
    commits = worker.process(messages, consumer=consumer, producer=producer)
    assert flushes == 1, "the follow-ups went out inside the first flush"
    assert sum(commits.values()) == 3
    assert _read(kafka, "dead") == [b"a@0:0", b"b@0:1", b"c@0:2"], "each names where its forward landed"

    worker.note_topic = "nosuchtopic"  # a follow-up refused for good: its input goes to the failed hook
    _send(kafka, [b"d"], key=lambda _i: b"same")
    failures: list[BaseException] = []
    worker.failed = lambda record, error: failures.append(error) or [Output("dead", b"letter")]  # type: ignore
    commits = worker.process(clients.take(consumer, 10, 1.0), consumer=consumer, producer=producer)
    assert [type(e) for e in failures] == [Refused] and sum(commits.values()) == 4
    assert _read(kafka, "dead")[-1] == b"letter"


def test_a_later_phase_waits_for_the_earlier_one_and_acknowledged_names_where_each_output_landed(
        kafka: KafkaSettings) -> None:
    landed: list[tuple[str, int, int]] = []

    class Phased(Worker[bytes]):
        reply_topic = "nosuchtopic"

        def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
            replies = [Output(self.reply_topic, r.value, cause=r.position) for r in records]
            return [*replies, Output("out", b"changelog of %d" % len(records), phase=1)]

        def failed(self, record: Record[bytes], error: BaseException) -> Iterable[Output]:
            raise RuntimeError("no dead letters: read it again")

        def acknowledged(self, delivered: list[Any]) -> None:
            landed.extend((d.output.topic, d.partition, d.offset) for d in delivered)

    stats: list[BatchStats] = []

    class Count(WorkerMetrics):
        def batch(self, worker: str, s: BatchStats) -> None:
            stats.append(s)

    _send(kafka, [b"v%d" % i for i in range(4)], key=lambda _i: b"same")
    worker = Phased(kafka=kafka, subscription=Subscription(group="g", topics=["in"]), metrics=[Count()])
    with worker:
        _until(lambda: any(s.rewound for s in stats), "the batch rewound")
        assert _read(kafka, "out") == [], "the changelog phase was not produced while a reply was unacknowledged"
        assert _committed(kafka) == 0
        worker.reply_topic = "dead"
        _until(lambda: _committed(kafka) == 4, "committed once both phases are acknowledged")
    assert _read(kafka, "out")[-1].startswith(b"changelog of ")
    assert ("out", 0, 0) in landed and sum(1 for t, _p, _o in landed if t == "dead") >= 4


def test_an_untracked_output_never_holds_its_input(kafka: KafkaSettings) -> None:
    class Cache(Worker[bytes]):
        def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
            return [o for r in records for o in (Output("out", r.value, cause=r.position),
                                                  Output("nosuchtopic", r.value, cause=r.position, tracked=False))]

        def failed(self, record: Record[bytes], error: BaseException) -> Iterable[Output]:
            raise AssertionError(f"an untracked output failed {record!r}: {error}")

    _send(kafka, [b"a", b"b"])
    with Cache(kafka=kafka, subscription=Subscription(group="g", topics=["in"])):
        _until(lambda: _committed(kafka) == 2, "both committed")
    assert sorted(_read(kafka, "out")) == [b"a", b"b"]


def test_assign_revoke_and_lost_hooks_follow_the_workers_own_bookkeeping(kafka: KafkaSettings) -> None:
    events: list[tuple[str, list[Any], int]] = []

    class Hooked(Echo):
        def on_assigned(self, partitions: list[Any]) -> None:
            events.append(("assigned", sorted(partitions), _committed(kafka)))

        def on_revoked(self, partitions: list[Any]) -> None:
            events.append(("revoked", sorted(partitions), _committed(kafka)))

        def on_lost(self, partitions: list[Any]) -> None:
            events.append(("lost", sorted(partitions), _committed(kafka)))

    first = Hooked(kafka, commit_every_s=3600.0)
    with first:
        _until(lambda: bool(events), "assigned")
        assert events[0][:2] == ("assigned", [("in", 0), ("in", 1)])
        _send(kafka, [b"v%d" % i for i in range(10)], key=lambda _i: b"same")
        _until(lambda: _committed(kafka) == 10, "the first commit")
        _send(kafka, [b"v%d" % i for i in range(10, 20)], key=lambda _i: b"same")
        _until(lambda: sum(first.batches) == 20, "handled all 20")
        with Echo(kafka):
            _until(lambda: any(e[0] == "revoked" for e in events), "revoked by the join")
    revoked = next(e for e in events if e[0] == "revoked")
    assert revoked[2] == 20, "on_revoked runs after the worker's final commit of what was acknowledged"
    kinds = [e[0] for e in events]
    assert kinds.index("lost") == kinds.index("revoked") + 1, "a revoke forgets its partitions' state too"
