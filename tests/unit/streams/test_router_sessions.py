"""The router records where a session sticks on the sessions topic (on its start, not per request), a record it
cannot send never fails the routing, and a session learned from the topic (a restart, a rebalance) is routed to
its instance (reach.core.sessionmap, docs/decisions/0041-idempotency-and-sessions-from-kafka.md)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from reach.core.sessionmap import scoped
from reach.envelopes import now_ms
from reach.kafka import codec
from reach.records import AgentRegistration, AgentState, Capability, Envelope, Receipt, Status
from tests.unit.streams.kafka_fakes import FakeProducer, settle
from tests.unit.streams.test_router import INBOX, NAMES, record, router


def _second_instance(r: Any) -> None:
    r.state.apply_registration("i2", AgentRegistration(
        agent_id="agent://demo/echo", instance_id="i2", build_version="1",
        capabilities=[Capability(name="demo.echo", version="1.0.0")], state=AgentState.READY,
        heartbeat_at=now_ms(), ttl_ms=600_000, max_concurrency=10_000, assigned_partitions=[1], inbox_topic=INBOX))


def _picked(producer: FakeProducer) -> list[str | None]:
    producer.flush()
    return [r.instance_id for r in (codec.decode(v, Receipt) for v in producer.to(NAMES.receipts))
            if r.status is Status.ROUTED]


def test_a_session_is_recorded_once_when_it_starts_not_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r._sessions_topic = NAMES.sessions
    producer = FakeProducer()
    batch = [record(n, session_key="s-1") for n in range(3)] + [record(3)]
    settle(r, cast(Any, batch), cast(Any, producer))
    producer.flush()
    [(topic, value, key)] = [s for s in producer.sent if s[0] == NAMES.sessions]
    assert key == b"default/s-1" and json.loads(value) == {"instance_id": "i1", "seen_at": json.loads(value)["seen_at"],
                                                           "tenant": "default"}, "a session is its tenant's"


def test_a_session_record_that_cannot_be_sent_costs_affinity_not_the_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r._sessions_topic = NAMES.sessions
    producer = FakeProducer(raise_on=lambda topic, _v: BufferError("queue full") if topic == NAMES.sessions else None)
    acks = settle(r, cast(Any, [record(0, session_key="s-1")]), cast(Any, producer))
    producer.flush()
    assert _picked(producer) == ["i1"] and acks.rewinds() == {}


def _routed_after_learning(monkeypatch: pytest.MonkeyPatch, learned: dict[tuple[str, str], str],
                           batch: list[Any]) -> list[str | None]:
    """The instances a batch is routed to by a router that learned `learned` ((tenant, session) -> instance)."""
    r = router(monkeypatch)
    _second_instance(r)
    now = now_ms()
    for (tenant, session), instance in learned.items():
        r.state.sessions.learn(scoped(tenant, session) or "", instance, now - 1_000, now)
    producer = FakeProducer()
    settle(r, cast(Any, batch), cast(Any, producer))
    return _picked(producer)


def test_a_session_learned_from_the_topic_goes_to_its_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    picked = _routed_after_learning(monkeypatch, {("default", "s-2"): "i2", ("default", "s-1"): "i1"},
                                    [record(n, session_key="s-2") for n in range(5)]
                                    + [record(n, partition=1, session_key="s-1") for n in range(5)])
    assert picked == ["i2"] * 5 + ["i1"] * 5


def test_one_tenants_session_key_never_steers_another_tenants_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Security finding (session affinity across tenants): tenant evil's session "s-1", stuck on i2, leaves tenant
    acme's "s-1" where acme's own session sticks (i1)."""
    picked = _routed_after_learning(monkeypatch, {("evil", "s-1"): "i2", ("acme", "s-1"): "i1"},
                                    [record(n, session_key="s-1", tenant="acme") for n in range(5)]
                                    + [record(5 + n, session_key="s-1", tenant="evil") for n in range(5)])
    assert picked == ["i1"] * 5 + ["i2"] * 5


def test_the_next_envelope_of_a_session_carries_the_snapshot_its_handlers_wrote_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ctx.session (docs/decisions/0076): a snapshot learned from an agent's record goes in the session's next
    envelope, replacing the caller's; another tenant's session of the same key gets none; the router's own record
    keeps it for compaction."""
    r = router(monkeypatch)
    r._sessions_topic = NAMES.sessions
    now = now_ms()
    r.state.sessions.learn(scoped("acme", "s-1") or "", "gone", now - 10, now, snapshot='{"n":1}', snapshot_at=now - 10)
    producer = FakeProducer()
    batch = [record(0, session_key="s-1", tenant="acme", session_snapshot="caller's"),
             record(1, session_key="s-1", tenant="evil")]
    settle(r, cast(Any, batch), cast(Any, producer))
    producer.flush()
    forwarded = [codec.decode(v, Envelope) for v in producer.to(INBOX)]
    assert [e.session_snapshot for e in forwarded] == ['{"n":1}', None]
    mine = [json.loads(v) for t, v, k in producer.sent if t == NAMES.sessions and k == b"acme/s-1"]
    assert mine and mine[-1]["snapshot"] == '{"n":1}'
