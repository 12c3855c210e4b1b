"""The router's fan-out, on fakes: an event on a subscribe capability becomes one delivery per subscribing agent on
the capability's topic and a FANNED_OUT receipt for the parent; a delivery read back is routed to its one agent's
inbox (never fanned out again, never shed); subscribers beside a handle-mode agent are notified when a handler gets
the request (decision 0076); a batch read again produces the same deliveries."""

from __future__ import annotations

from typing import Any, cast

import pytest

from reach.core import fanout
from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec
from reach.kafka import headers as H
from reach.records import AgentRegistration, AgentState, Capability, CapabilityMode, Envelope, Receipt, Status
from reach.streams.router.route_loop import Router
from tests.unit.streams.kafka_fakes import FakeMessage, settle
from tests.unit.streams.test_router import NAMES, router
from tests.unit.streams.test_router_fallback import Producer

ORDERS = NAMES.capability("demo.order.created")
AUDIT, NOTIFY = "agent://demo/audit", "agent://demo/notify"


def register(r: Router, instance_id: str, agent_id: str, mode: CapabilityMode = CapabilityMode.SUBSCRIBE,
             **kw: Any) -> None:
    r.state.apply_registration(instance_id, AgentRegistration(
        agent_id=agent_id, instance_id=instance_id, build_version="1",
        capabilities=[Capability(name="demo.order.created", version="1.0.0", mode=mode)], state=AgentState.READY,
        heartbeat_at=now_ms(), ttl_ms=600_000, max_concurrency=1, assigned_partitions=[0],
        inbox_topic=NAMES.inbox(agent_id), **kw))


def subscribed(monkeypatch: pytest.MonkeyPatch) -> Router:
    r = router(monkeypatch)
    register(r, "a1", AUDIT)
    register(r, "a2", AUDIT)
    register(r, "n1", NOTIFY)
    return r


def event(offset: int = 0, **fields: Any) -> tuple[FakeMessage, Envelope]:
    envelope = new_envelope("demo.order.created", {"order_id": f"o-{offset}"}, **fields)
    return FakeMessage(ORDERS, 0, offset, codec.encode(envelope), envelope.message_id.encode(), []), envelope


def test_an_event_becomes_one_delivery_per_subscribing_agent_and_a_fanned_out_receipt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = subscribed(monkeypatch), Producer()
    msg, envelope = event(reply_to=NAMES.replies("c1"))
    acks = settle(r, cast(Any, [msg]), cast(Any, producer))
    deliveries = [codec.decode(v, Envelope) for v in producer.to(ORDERS)]
    assert [(d.to_agent, d.message_id, d.parent_id) for d in deliveries] == [
        (AUDIT, f"{envelope.message_id}-s0-demo.audit", envelope.message_id),
        (NOTIFY, f"{envelope.message_id}-s0-demo.notify", envelope.message_id)]
    assert all(d.payload == envelope.payload and d.reply_to is None for d in deliveries)
    [parent] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert parent.status is Status.FANNED_OUT and parent.message_id == envelope.message_id
    assert parent.fanout is not None and [d.agent_id for d in parent.fanout.deliveries] == [AUDIT, NOTIFY]
    assert parent.delivery_timeout_ms == 0, "a parent has no delivery clock"
    [headers] = [h for t, h in producer.headers if t == NAMES.receipts]
    assert dict(headers)[H.REPLY_TO] == NAMES.replies("c1").encode(), "the parent answers its caller"
    assert producer.to(NAMES.inbox(AUDIT)) == [] and acks.commits() == {(ORDERS, 0): 1}
    assert r.stats.snapshot().totals["fanned_out"] == 1

    again = Producer()  # read again (not committed before a crash): the same deliveries, byte for byte
    settle(r, cast(Any, [msg]), cast(Any, again))
    assert again.to(ORDERS) == producer.to(ORDERS)


def test_a_delivery_goes_to_its_agents_inbox_with_its_parent_on_the_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = subscribed(monkeypatch), Producer()
    _msg, envelope = event()
    child = fanout.delivery(codec.decode_dict("Envelope", codec.encode(envelope)), NOTIFY)
    value = codec.encode_dict("Envelope", child)
    settle(r, cast(Any, [FakeMessage(ORDERS, 0, 1, value, b"k", [])]), cast(Any, producer))
    assert producer.to(ORDERS) == [], "a delivery is never fanned out again"
    assert producer.to(NAMES.inbox(NOTIFY)) == [value]
    [routed] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert routed.status is Status.ROUTED and routed.agent_id == NOTIFY
    [headers] = [h for t, h in producer.headers if t == NAMES.receipts]
    assert dict(headers)[H.FANOUT_OF] == envelope.message_id.encode()


def test_a_busy_subscriber_queues_its_deliveries_instead_of_shedding_them(monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = router(monkeypatch), Producer()
    register(r, "n1", NOTIFY, inflight=1, max_queue=0)  # full by its heartbeat: a request would be shed
    _msg, envelope = event()
    child = codec.encode_dict("Envelope", fanout.delivery(codec.decode_dict("Envelope", codec.encode(envelope)),
                                                          NOTIFY))
    settle(r, cast(Any, [FakeMessage(ORDERS, 0, 0, child, b"k", [])]), cast(Any, producer))
    assert producer.to(NAMES.inbox(NOTIFY)) == [child]


def test_beside_a_handler_a_subscriber_is_notified_and_the_handler_ends_the_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = router(monkeypatch), Producer()
    register(r, "a1", AUDIT)
    register(r, "h1", "agent://demo/orders", CapabilityMode.HANDLE)
    msg, envelope = event()
    settle(r, cast(Any, [msg]), cast(Any, producer))
    assert len(producer.to(NAMES.inbox("agent://demo/orders"))) == 1, "a handler gets the request"
    [note] = [codec.decode(v, Envelope) for v in producer.to(ORDERS)]
    assert (note.message_id, note.to_agent, note.parent_id) == (
        f"{envelope.message_id}-n0-demo.audit", AUDIT, envelope.message_id)
    assert fanout.OF_HEADER not in note.headers and note.headers[fanout.NOTIFY_HEADER] == envelope.message_id
    statuses = [codec.decode(v, Receipt).status for v in producer.to(NAMES.receipts)]
    assert statuses == [Status.ROUTED], "no FANNED_OUT: the request's row ends by its handler"

    routed, retried = Producer(), Producer()  # the notification read back goes to the subscriber's inbox only
    settle(r, cast(Any, [FakeMessage(ORDERS, 0, 1, codec.encode(note), b"k", [])]), cast(Any, routed))
    assert len(routed.to(NAMES.inbox(AUDIT))) == 1 and routed.to(ORDERS) == []
    again = event(2, reply_to=None)[0]  # a retry of a request notifies nobody again
    retry = codec.decode(cast(bytes, again.value()), Envelope).model_copy(update={"attempt": 2})
    settle(r, cast(Any, [FakeMessage(ORDERS, 0, 2, codec.encode(retry), b"k", [])]), cast(Any, retried))
    assert retried.to(ORDERS) == [] and len(retried.to(NAMES.inbox("agent://demo/orders"))) == 1


def test_an_event_no_subscriber_is_ready_for_ends_unroutable(monkeypatch: pytest.MonkeyPatch) -> None:
    r, producer = router(monkeypatch), Producer()
    register(r, "a1", AUDIT)
    r.state.apply_registration("a1", r.state.registration("a1").model_copy(  # type: ignore[union-attr]
        update={"state": AgentState.DRAINING}))
    msg, _envelope = event()
    settle(r, cast(Any, [msg]), cast(Any, producer))
    [ending] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert ending.status is Status.UNROUTABLE and producer.to(ORDERS) == []


def test_a_forged_fanout_header_on_an_id_the_router_did_not_derive_names_no_parent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Security finding (forged fan-out parent): an envelope produced with `reach-fanout-of` naming another message
    is routed as what it is (an event, fanned out under its own id), and its receipts name no parent."""
    r, producer = subscribed(monkeypatch), Producer()
    _msg, envelope = event(to_agent=NOTIFY)
    forged = envelope.model_copy(update={"headers": {fanout.OF_HEADER: "victim-message"}})
    settle(r, cast(Any, [FakeMessage(ORDERS, 0, 1, codec.encode(forged), b"k", [])]), cast(Any, producer))
    assert [codec.decode(v, Envelope).parent_id for v in producer.to(ORDERS)] == [envelope.message_id]
    assert producer.to(NAMES.inbox(NOTIFY)) == [], "not taken for a delivery"
    assert all(H.FANOUT_OF not in dict(h or []) for t, h in producer.headers if t == NAMES.receipts)
