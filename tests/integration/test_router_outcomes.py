"""Outcomes other than a plain forward: overload, no route, bad input, live weights, late capabilities."""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import TopicPartition

from reach import control
from reach.envelopes import new_envelope, now_ms
from reach.kafka import clients, codec
from reach.kafka.codec import MARKER
from reach.names import Names
from reach.records import Envelope, Status, Weights
from reach.settings import KafkaSettings
from tests.integration.router_helpers import (
    Instance,
    Sender,
    dlq_tail,
    first_per_message,
    receipts_tail,
    running_router,
    sees,
    wait_for,
)

pytestmark = pytest.mark.integration
TERMINAL_OR_ROUTED = {Status.ROUTED, Status.FAILED, Status.REJECTED, Status.UNROUTABLE, Status.DEAD_LETTERED}


def outcomes(names: Names, ids: list[str]) -> dict[str, object]:
    tail = receipts_tail(names)
    try:
        tail.until(lambda rs: len(first_per_message(rs, ids, TERMINAL_OR_ROUTED)) == len(ids),
                   what=f"{len(ids)} receipts")
        return first_per_message(tail.records, ids, TERMINAL_OR_ROUTED)  # type: ignore[return-value]
    finally:
        tail.close()


def inbox_size(topic: str) -> int:
    consumer = clients.consumer("size-probe", KafkaSettings())
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions)
    finally:
        consumer.close()


def test_all_overloaded_fails_fast_and_forwards_nothing(namespace: str) -> None:
    """Every candidate busy past 80% of its handlers with its queue full: OVERLOAD, nothing forwarded. One handler
    each, busy; the 2 s budget is no longer than what a queue behind either would take to start."""
    names = Names(namespace)
    hot = Instance(names, "hot", inflight=1, max_concurrency=1)
    full = Instance(names, "full", inflight=1, max_concurrency=1, partitions=[1])
    hot.heartbeat()
    full.heartbeat()
    with running_router() as router:
        wait_for(lambda: sees(router, hot) and sees(router, full), what="instances registered")
        ids = Sender(names).many(20, budget_ms=2_000)
        got = outcomes(names, ids)
        assert {r.status for r in got.values()} == {Status.FAILED}  # type: ignore[attr-defined]
        sample = next(iter(got.values()))
        assert sample.error.kind == "OVERLOAD" and sample.retry_after_ms > 0  # type: ignore[attr-defined]
        assert {c.instance_id for c in sample.decision.candidates} == {"hot", "full"}  # type: ignore[attr-defined]
    assert inbox_size(hot.inbox) == 0


def test_no_route_is_unroutable_or_dead_lettered(namespace: str) -> None:
    names = Names(namespace)
    Instance(names, "a").heartbeat()
    sender = Sender(names)
    with running_router():
        plain = new_envelope("nobody.serves", {"x": 1})
        later = new_envelope("nobody.serves", {"x": 2}, expire_at=now_ms() + 600_000)
        sender.send(plain)
        sender.send(later)
        sender.flush()
        got = outcomes(names, [plain.message_id, later.message_id])
        assert got[plain.message_id].status is Status.UNROUTABLE  # type: ignore[attr-defined]
        assert got[later.message_id].status is Status.DEAD_LETTERED  # type: ignore[attr-defined]
        dlq = dlq_tail(names)
        letters = dlq.until(lambda ds: ds, what="a dead letter")
        dlq.close()
        assert [d.message_id for d in letters] == [later.message_id]  # UNROUTABLE writes none
        assert letters[0].reason == "NO_ROUTE" and letters[0].envelope == codec.encode(later)


def test_bad_input_is_rejected_dead_lettered_and_the_partition_moves_on(namespace: str) -> None:
    names = Names(namespace)
    Instance(names, "a").heartbeat()
    topic = names.capability("text.echo")
    good = new_envelope("text.echo", {"ok": True}, session_key="same-partition")
    empty = good.model_copy(update={"message_id": "empty-cap", "capability": ""})
    bad_range = good.model_copy(update={"message_id": "bad-range", "capability_version": "not a range"})
    garbage = b"\x00\x01 definitely not avro"
    unknown = MARKER + b"\x01\x02\x03\x04\x05\x06\x07\x08" + b"body"
    sender = Sender(names)
    for value in (garbage, unknown, codec.encode(empty), codec.encode(bad_range), codec.encode(good)):
        sender.raw(topic, "same-partition", value)
    sender.flush()
    with running_router():
        rec = receipts_tail(names)
        receipts = rec.until(lambda rs: any(r.message_id == good.message_id for r in rs) and len(rs) >= 5 and rs,
                             what="5 receipts")
        rec.close()
        statuses = Counter((r.status, r.error.code if r.error else None) for r in receipts)
        assert statuses[(Status.REJECTED, "UNDECODABLE")] == 1
        assert statuses[(Status.REJECTED, "UNKNOWN_SCHEMA")] == 1
        assert statuses[(Status.REJECTED, "EMPTY_CAPABILITY")] == 1
        assert statuses[(Status.REJECTED, "BAD_VERSION_RANGE")] == 1
        assert statuses[(Status.ROUTED, None)] == 1
        dlq = dlq_tail(names)
        letters = dlq.until(lambda ds: len(ds) >= 4 and ds, what="4 dead letters")
        dlq.close()
        assert {d.envelope for d in letters} == {garbage, unknown, codec.encode(empty), codec.encode(bad_range)}
        assert all(d.origin_topic == topic for d in letters)
        origin = {h[0]: h[1] for h in dlq.raw[0].headers()}
        assert origin["x-reach-origin-topic"] == topic.encode()


def test_weight_change_applies_without_restart(namespace: str) -> None:
    names = Names(namespace)
    near = Instance(names, "near", region="us", inflight=300, partitions=[0])  # 30% busy, same region
    idle = Instance(names, "idle", region="eu", inflight=0, partitions=[1])
    near.heartbeat()
    idle.heartbeat()
    sender = Sender(names)
    with running_router() as router:
        wait_for(lambda: sees(router, near) and sees(router, idle), what="instances registered")
        first = outcomes(names, sender.many(20, region="us"))
        assert {r.instance_id for r in first.values()} == {"near"}  # type: ignore[attr-defined]
        load_only = Weights(fit=0.0, locality=0.0, load=1.0, affinity=0.0)
        control.publish(control.weights_record(load_only, scope="text.echo", by="test"), names=names,
                        kafka=KafkaSettings())
        wait_for(lambda: router.state.control.weights("text.echo")["load"] == 1.0, what="weights seen")
        second = outcomes(names, sender.many(20, region="us"))
        assert {r.instance_id for r in second.values()} == {"idle"}  # type: ignore[attr-defined]
        assert next(iter(second.values())).decision.weights["load"] == 1.0  # type: ignore[attr-defined]


def test_capability_created_after_start_is_routed(namespace: str) -> None:
    names = Names(namespace)
    echo = Instance(names, "echo-1")
    echo.heartbeat()
    sender = Sender(names)
    with running_router() as router:
        wait_for(lambda: sees(router, echo), what="echo registered")
        assert set(outcomes(names, sender.many(3)))  # the router is consuming
        late = Instance(names, "late-1", agent_id="agent://late/one", capability="late.arrival", version="1.0.0")
        late.heartbeat()
        ids = sender.many(5, capability="late.arrival")  # creates <ns>.cap.late.arrival now
        got = outcomes(names, ids)
        assert {r.instance_id for r in got.values()} == {"late-1"}  # type: ignore[attr-defined]


def test_envelope_constructed_without_validation_roundtrips() -> None:
    # guards the bad-input test: an empty capability is encodable, so the router must reject it
    env = new_envelope("text.echo", {}).model_copy(update={"capability": ""})
    assert codec.decode(codec.encode(env), Envelope).capability == ""


def test_weights_cli_show_and_set(namespace: str) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reach", "weights", *args], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], env=dict(os.environ), timeout=60)

    shown = json.loads(cli("show", "--json").stdout)
    assert shown["*"]["fit"] == 0.4 and shown["*"]["updated_by"] == "default"
    assert cli("set", "--capability", "text.echo", "--load", "0.9").returncode == 0
    scoped = json.loads(cli("show", "--capability", "text.echo", "--json").stdout)["text.echo"]
    assert scoped["load"] == 0.9 and scoped["fit"] == 0.4 and scoped["from_scope"] == "text.echo"
    bad = cli("set", "--fit", "-1")
    assert bad.returncode == 2 and "must be >= 0" in bad.stderr
