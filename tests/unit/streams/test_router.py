"""The router's batch on in-memory fakes: failures are per record, never the batch nor the loop."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from reach.envelopes import new_envelope, now_ms
from reach.intent.unroutable import IntentHandoff
from reach.kafka import codec
from reach.kafka.codec import RegistryUnavailable
from reach.names import Names
from reach.records import AgentRegistration, AgentState, Capability, DeadLetter, Envelope, Receipt, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.router.route_loop import Router
from reach.streams.router.stats import OTHER
from reach.terminals import Fence, MemorySlots
from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer, settle

NS = "ns"
NAMES = Names(NS)
CAP = NAMES.capability("demo.echo")
INBOX = NAMES.inbox("agent://demo/echo")


def router(monkeypatch: pytest.MonkeyPatch) -> Router:
    monkeypatch.setenv("REACH_NAMESPACE", NS)
    r = Router(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(),
               fence=Fence(MemorySlots(), writer="router"), handoff=IntentHandoff())
    r.state.apply_registration("i1", AgentRegistration(
        agent_id="agent://demo/echo", instance_id="i1", build_version="1",
        capabilities=[Capability(name="demo.echo", version="1.0.0")], state=AgentState.READY,
        heartbeat_at=now_ms(), ttl_ms=600_000, max_concurrency=10_000, assigned_partitions=[0], inbox_topic=INBOX))
    return r


def record(offset: int, partition: int = 0, value: bytes | None = None, **envelope: Any) -> FakeMessage:
    body = value if value is not None else codec.encode(new_envelope("demo.echo", {"n": offset}, **envelope))
    return FakeMessage(CAP, partition, offset, body, b"k", [])


def receipts(producer: FakeProducer) -> list[Receipt]:
    return [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]


def envelope_id(msg: FakeMessage) -> str:
    return codec.decode(cast(bytes, msg.value()), Envelope).message_id


def test_one_refused_forward_holds_only_its_partition_from_that_record(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    bad = record(1)
    producer = FakeProducer(refuse=lambda topic, value: KafkaError(KafkaError._MSG_TIMED_OUT)
                            if topic == INBOX and value == bad.value() else None)
    batch = [record(0), bad, record(2), record(0, partition=1), record(1, partition=1)]
    acks = settle(r, cast(Any, batch), cast(Any, producer))
    assert acks.commits() == {(CAP, 0): 1, (CAP, 1): 2}
    assert acks.rewinds() == {(CAP, 0): 1}
    assert not [x for x in receipts(producer) if x.status is Status.REJECTED], "a healthy envelope is not REJECTED"


def test_a_synchronous_produce_error_fails_that_record_not_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    first = record(0)
    producer = FakeProducer(raise_on=lambda topic, value: KafkaException(KafkaError(KafkaError._QUEUE_FULL))
                            if topic == INBOX and value == first.value() else None)
    acks = settle(r, cast(Any, [first, record(0, partition=1)]), cast(Any, producer))
    assert acks.commits() == {(CAP, 1): 1} and acks.rewinds() == {(CAP, 0): 0}
    assert {x.status for x in receipts(producer)} == {Status.ROUTED}


def test_a_megabyte_record_is_rejected_and_its_dead_letter_keeps_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    huge = record(0, value=codec.encode(new_envelope("demo.echo", {"x": "a" * 1_000_000}, max_payload_bytes=2_000_000)))
    producer = FakeProducer()
    acks = settle(r, cast(Any, [huge, record(1)]), cast(Any, producer))
    assert acks.commits() == {(CAP, 0): 2}
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.reason == "OVERSIZE" and letter.envelope == huge.value()
    assert [x.status for x in receipts(producer)] == [Status.REJECTED, Status.ROUTED]


def test_a_dead_letter_over_the_dlq_limit_goes_by_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r._max_bytes = 500_000  # a cluster whose dlq takes less than the record
    huge = record(7, value=codec.encode(new_envelope("demo.echo", {"x": "a" * 1_000_000}, max_payload_bytes=2_000_000)))
    producer = FakeProducer()
    assert settle(r, cast(Any, [huge]), cast(Any, producer)).commits() == {(CAP, 0): 8}
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.envelope == b"" and (letter.origin_topic, letter.origin_offset) == (CAP, 7)
    assert letter.error and "replay reads it from origin" in letter.error.message


def test_a_letter_the_broker_refuses_for_good_is_rewritten_by_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    producer = FakeProducer(refuse=lambda topic, value: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
                            if topic == NAMES.dlq and len(value) > 1000 else None)
    huge = record(0, value=codec.encode(new_envelope("demo.echo", {"x": "a" * 400_000}, max_payload_bytes=2_000_000)))
    acks = settle(r, cast(Any, [huge]), cast(Any, producer))
    assert acks.commits() == {(CAP, 0): 1}
    assert [codec.decode(v, DeadLetter).envelope for v in producer.to(NAMES.dlq)] == [b""]


def test_a_reply_to_outside_the_reply_topics_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    producer = FakeProducer()
    bad = record(0, reply_to=NAMES.control)
    good = record(1, reply_to=NAMES.replies("c1"))
    settle(r, cast(Any, [bad, good]), cast(Any, producer))
    by_id = {x.message_id: x for x in receipts(producer)}
    rejected = by_id[envelope_id(bad)]
    assert rejected.status is Status.REJECTED and rejected.error and rejected.error.code == "BAD_REPLY_TO"
    assert by_id[envelope_id(good)].status is Status.ROUTED
    assert len(producer.to(INBOX)) == 1


def test_a_registry_outage_is_not_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)

    def down(_name: str, _data: bytes) -> dict[str, Any]:
        raise RegistryUnavailable("the registry did not answer")

    monkeypatch.setattr("reach.kafka.avrogen.decode_dict", down)  # the router reads envelopes through it
    producer = FakeProducer()
    acks = settle(r, cast(Any, [record(0), record(1), record(0, partition=1)]), cast(Any, producer))
    assert acks.commits() == {} and acks.rewinds() == {(CAP, 0): 0, (CAP, 1): 0}
    assert producer.sent == [], "nothing REJECTED, nothing dead-lettered"


def test_stats_of_capabilities_nobody_serves_share_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    msgs = [FakeMessage(NAMES.capability(f"made.up{i}"), 0, i,
                        codec.encode(new_envelope(f"made.up{i}", {})), None, []) for i in range(50)]
    settle(r, cast(Any, [*msgs, record(0, partition=1)]), cast(Any, FakeProducer()))
    assert set(r.stats.snapshot().by_capability) == {OTHER, "demo.echo"}


def test_a_failing_partition_backs_off_alone_and_recovers() -> None:
    from reach.kafka.backoff import PartitionBackoff

    held = PartitionBackoff(first_s=0.1, most_s=0.4)
    a, b = ("cap", 0), ("cap", 1)
    assert [held.hold(a, 0.0), held.hold(a, 0.0), held.hold(a, 0.0), held.hold(a, 0.0)] == [0.1, 0.2, 0.4, 0.4]
    assert held.due(0.3) == [] and held.due(0.4) == [a] and held.due(10) == []
    held.hold(b, 1.0)
    held.cleared(a)
    assert held.hold(a, 1.0) == 0.1, "after a success the backoff starts over"
    assert sorted(held.due(1.2)) == [a, b]


class _Ordered(FakeProducer):
    """A FakeProducer that notes the order of produce calls and of flushes."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls: list[str] = []

    def produce(self, topic: str, value: bytes, key: Any = None, headers: Any = None,
                on_delivery: Any = None, partition: int | None = None) -> None:
        self.calls.append(topic)
        super().produce(topic, value, key, headers, on_delivery, partition)

    def flush(self, _timeout: float = 0) -> int:
        self.calls.append("flush")
        return super().flush(_timeout)


def test_the_batchs_routed_receipts_follow_its_forwards_inside_one_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    producer = _Ordered()
    batch = [record(0), record(1), record(0, partition=1)]
    acks = settle(r, cast(Any, batch), cast(Any, producer))
    assert producer.calls == [INBOX] * 3 + ["flush"] + [NAMES.receipts] * 3, \
        "each ROUTED receipt is produced from its forward's delivery report, inside the batch's one flush"
    assert acks.commits() == {(CAP, 0): 2, (CAP, 1): 1}
    routed = receipts(producer)
    assert [x.message_id for x in routed] == [envelope_id(m) for m in batch]
    assert all(x.status is Status.ROUTED and x.decision and x.decision.topic == INBOX for x in routed)


def test_a_refused_routed_receipt_holds_its_record_though_the_forward_landed(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    second = record(1)
    mid = envelope_id(second)
    producer = FakeProducer(refuse=lambda topic, value: KafkaError(KafkaError._MSG_TIMED_OUT)
                            if topic == NAMES.receipts and mid.encode() in value else None)
    acks = settle(r, cast(Any, [record(0), second, record(2)]), cast(Any, producer))
    assert len(producer.to(INBOX)) == 3
    assert acks.commits() == {(CAP, 0): 1} and acks.rewinds() == {(CAP, 0): 1}


def test_a_routed_receipt_that_cannot_be_queued_fails_its_record_only(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    first = record(0)
    mid = envelope_id(first)
    producer = FakeProducer(raise_on=lambda topic, value: BufferError("queue full")
                            if topic == NAMES.receipts and mid.encode() in value else None)
    other = record(0, partition=1)
    acks = settle(r, cast(Any, [first, other]), cast(Any, producer))
    assert acks.commits() == {(CAP, 1): 1} and acks.rewinds() == {(CAP, 0): 0}
    assert [x.message_id for x in receipts(producer)] == [envelope_id(other)]


def test_the_routing_table_follows_the_registry_and_the_silence_of_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-capability table is kept from batch to batch (0054), never past a registry record or an instance's
    2 x ttl of silence."""
    r = router(monkeypatch)
    clock = [now_ms()]
    monkeypatch.setattr("reach.streams.router.route_loop.now_ms", lambda: clock[0])

    def statuses(offset: int) -> list[Status]:
        producer = FakeProducer()
        settle(r, cast(Any, [record(offset)]), cast(Any, producer))
        return [x.status for x in receipts(producer)]

    assert statuses(0) == [Status.ROUTED]
    r.state.apply_registration("i1", None)  # a tombstone: the next batch must not route to it
    assert statuses(1) == [Status.UNROUTABLE]
    heard = clock[0]
    r.state.apply_registration("i1", AgentRegistration(
        agent_id="agent://demo/echo", instance_id="i1", build_version="1",
        capabilities=[Capability(name="demo.echo", version="1.0.0")], state=AgentState.READY,
        heartbeat_at=heard, ttl_ms=1_000, max_concurrency=10_000, assigned_partitions=[0], inbox_topic=INBOX))
    assert statuses(2) == [Status.ROUTED]
    clock[0] = heard + 2_000  # the last moment it counts as live
    assert statuses(3) == [Status.ROUTED]
    clock[0] = heard + 2_001  # silent for more than 2 x ttl: OFFLINE, with no record applied
    assert statuses(4) == [Status.UNROUTABLE]


def test_each_decision_is_timed_into_the_apps_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.metrics import Metrics

    r, metrics = router(monkeypatch), Metrics()
    r.observe_decision = metrics.decision.observe  # as reach.streams.app wires it
    settle(r, cast(Any, [record(0), record(1)]), cast(Any, FakeProducer()))
    count = metrics.registry.get_sample_value("agentreach_route_decision_seconds_count")
    assert count == 2, "agentreach_route_decision_seconds: one observation per routing decision"
