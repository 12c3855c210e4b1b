"""The router's own endings (UNROUTABLE, OVERLOAD, UNAVAILABLE) go to the capability's POLICY fallback, on fakes:
one child per won ending, the same child on a re-read, none for a lost ending or a fallback without a topic."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from reach import control
from reach.core import fallback
from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec
from reach.kafka import headers as H
from reach.receipts import receipt_for
from reach.records import AgentRegistration, AgentState, Capability, Envelope, Policy, Receipt, Status, StepStatus
from reach.streams.router.route_loop import Router
from reach.terminals import Fence, MemorySlots
from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer, settle
from tests.unit.streams.test_router import CAP, NAMES, router

NOBODY = NAMES.capability("demo.nobody")


@dataclass
class Producer(FakeProducer):
    """Keeps the headers of every record produced, by topic."""

    headers: list[tuple[str, Any]] = field(default_factory=list)

    def produce(self, topic: str, value: bytes, key: Any = None, headers: Any = None, **kw: Any) -> None:
        self.headers.append((topic, headers))
        super().produce(topic, value, key=key, headers=headers, **kw)


def with_fallback(monkeypatch: pytest.MonkeyPatch, *, topics: frozenset[str] = frozenset({CAP})) -> Router:
    r = router(monkeypatch)
    record = control.policy_record(Policy(fallback="demo.echo"), scope="demo.nobody")
    r.state.control.apply(record.key, record)
    r.topics = cast(Any, SimpleNamespace(subscribed=topics))
    return r


def unroutable(offset: int = 0) -> tuple[FakeMessage, Envelope]:
    envelope = new_envelope("demo.nobody", {"n": offset}, callback="webhook:https://example.com/hook")
    return FakeMessage(NOBODY, 0, offset, codec.encode(envelope), b"k", []), envelope


def test_an_unroutable_request_goes_to_the_fallback_and_its_ending_names_the_child(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = with_fallback(monkeypatch), Producer()
    msg, envelope = unroutable()
    acks = settle(r, cast(Any, [msg]), cast(Any, producer))
    [child] = [codec.decode(v, Envelope) for v in producer.to(CAP)]
    assert (child.message_id, child.parent_id, child.capability, child.trace_id) == (
        f"{envelope.message_id}-fb0", envelope.message_id, "demo.echo", envelope.trace_id)
    assert (child.payload, child.deadline, child.callback) == (envelope.payload, envelope.deadline, envelope.callback)
    [ending] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert ending.status is Status.UNROUTABLE
    [receipt_headers] = [h for t, h in producer.headers if t == NAMES.receipts]
    mark = dict(receipt_headers)[H.FALLBACK]
    assert fallback.parse_mark(mark.decode()) is not None and mark.decode() == f"demo.echo {child.message_id}"
    assert acks.commits() == {(NOBODY, 0): 1}

    again = Producer()  # read again (not committed before a crash): the same child, the same ending
    settle(r, cast(Any, [msg]), cast(Any, again))
    assert again.to(CAP) == producer.to(CAP) and again.to(NAMES.receipts) == producer.to(NAMES.receipts)


def test_a_lost_ending_sends_no_child(monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer, slots = with_fallback(monkeypatch), Producer(), MemorySlots()
    r.fence = Fence(slots, writer="router")
    msg, envelope = unroutable()
    won = codec.encode(receipt_for(envelope, Status.COMPLETED, agent_id="agent://x/y", instance_id="i1",
                                   step_status=StepStatus.OK))
    slots.values[envelope.message_id, envelope.generation] = won
    settle(r, cast(Any, [msg]), cast(Any, producer))
    assert producer.to(CAP) == [] and producer.to(NAMES.receipts) == [won]
    assert all(H.FALLBACK not in dict(h or []) for t, h in producer.headers if t == NAMES.receipts)


def test_no_child_without_the_fallbacks_topic_or_when_the_budget_is_spent(monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = with_fallback(monkeypatch, topics=frozenset()), Producer()
    msg, _ = unroutable()
    settle(r, cast(Any, [msg]), cast(Any, producer))
    assert producer.to(CAP) == [] and [codec.decode(v, Receipt).status for v in producer.to(NAMES.receipts)] == [
        Status.UNROUTABLE]
    deep, producer = with_fallback(monkeypatch), Producer()
    envelope = new_envelope("demo.nobody", {})  # a child at the chain's depth (new_envelope drops a caller's marks)
    envelope = envelope.model_copy(update={"headers": {fallback.DEPTH_HEADER: str(fallback.MAX_DEPTH)}})
    settle(deep, cast(Any, [FakeMessage(NOBODY, 0, 0, codec.encode(envelope), b"k", [])]), cast(Any, producer))
    assert producer.to(CAP) == [], "a chain at its depth ends here"


def test_an_overloaded_request_goes_to_the_fallback_too(monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = router(monkeypatch), Producer()
    busy = NAMES.capability("demo.busy")
    r.state.apply_registration("b1", AgentRegistration(
        agent_id="agent://demo/busy", instance_id="b1", build_version="1",
        capabilities=[Capability(name="demo.busy", version="1.0.0")], state=AgentState.READY, heartbeat_at=now_ms(),
        ttl_ms=600_000, max_concurrency=10, inflight=10, assigned_partitions=[0],
        inbox_topic=NAMES.inbox("agent://demo/busy")))
    record = control.policy_record(Policy(fallback="demo.echo"), scope="demo.busy")
    r.state.control.apply(record.key, record)
    r.topics = cast(Any, SimpleNamespace(subscribed=frozenset({CAP, busy})))
    envelope = new_envelope("demo.busy", {"n": 1})
    settle(r, cast(Any, [FakeMessage(busy, 0, 0, codec.encode(envelope), b"k", [])]), cast(Any, producer))
    [ending] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert ending.status is Status.FAILED and ending.error is not None and ending.error.kind == "OVERLOAD"
    [child] = [codec.decode(v, Envelope) for v in producer.to(CAP)]
    assert (child.message_id, child.capability) == (f"{envelope.message_id}-fb0", "demo.echo")
