"""Fan-out (pure): who gets an event on a subscribe capability, the delivery envelopes, subscribers beside a
handler and their filters, and the parent's row collecting its deliveries' endings into one ending, however often
receipts are folded again."""

from __future__ import annotations

from typing import Any

from reach.core import fanout
from reach.core.deadlines import due_tasks
from reach.core.lifecycle import StatusRow, fold
from reach.kafka.codec import decode_dict, encode_dict
from reach.records import AgentRegistration, AgentState, CapabilityMode, ErrorInfo, Receipt, Status
from tests.unit.routing_fixtures import reg

CAP = "demo.order.created"
AUDIT, NOTIFY = "agent://demo/audit", "agent://demo/notify"


def sub(instance_id: str, agent_id: str, **kw: Any) -> AgentRegistration:
    base = reg(instance_id, agent_id=agent_id, capability=CAP, **kw)
    caps = [c.model_copy(update={"mode": CapabilityMode.SUBSCRIBE}) for c in base.capabilities]
    return base.model_copy(update={"capabilities": caps})


def envelope(**kw: Any) -> dict[str, Any]:
    base = decode_dict("Envelope", encode_dict("Envelope", {
        "message_id": "m1", "trace_id": "t1", "parent_id": None, "tenant": "acme", "source": "app", "capability": CAP,
        "capability_version": "*", "payload": b'{"order":1}', "created_at": 1_000, "deadline": 46_000,
        "delivery_timeout_ms": 5_000, "execution_timeout_ms": 0, "attempt": 1, "generation": 0,
        "idempotency_key": "k1", "reply_to": "ns.replies.c1", "callback": '{"channel":"webhook"}',
        "headers": {"h": "v"}, "routing": {"session_key": "s1"}}))
    return {**base, **kw}


# -- the router's side --------------------------------------------------------------------------------------------

def test_every_subscribing_agent_gets_the_event_once_however_many_instances_it_runs() -> None:
    parts = fanout.split(CAP, [sub("a1", AUDIT), sub("a2", AUDIT), sub("n1", NOTIFY)])
    assert parts.fans_out and not parts.handlers
    assert fanout.subscribers(envelope(), parts) == [AUDIT, NOTIFY]


def test_beside_a_handler_the_subscribers_are_observers_and_the_request_does_not_fan_out() -> None:
    handler = reg("h1", agent_id="agent://demo/orders", capability=CAP)
    parts = fanout.split(CAP, [sub("a1", AUDIT), handler])
    assert not parts.fans_out and parts.observed
    assert parts.handlers == (handler,)
    assert fanout.subscribers(envelope(to_agent="agent://demo/orders"), parts, observing=True) == [AUDIT], \
        "notified whichever handler the caller named"


def test_a_subscribers_filter_picks_its_events_by_tag_or_jsonpath() -> None:
    urgent, big = sub("u1", "agent://demo/urgent"), sub("b1", "agent://demo/big")
    urgent = urgent.model_copy(update={"capabilities": [
        c.model_copy(update={"filter": "tags:urgent"}) for c in urgent.capabilities]})
    big = big.model_copy(update={"capabilities": [
        c.model_copy(update={"filter": "$[?(@.amount > 100)]"}) for c in big.capabilities]})
    parts = fanout.split(CAP, [urgent, big, sub("a1", AUDIT)])
    small = envelope(payload=b'{"amount": 5}')
    assert fanout.subscribers(small, parts) == [AUDIT]
    assert fanout.subscribers(envelope(payload=b'{"amount": 500}'), parts) == [AUDIT, "agent://demo/big"]
    tagged = {**small, "routing": {**small["routing"], "tags": ["urgent", "eu"]}}
    assert fanout.subscribers(tagged, parts) == [AUDIT, "agent://demo/urgent"]
    assert fanout.subscribers(envelope(payload=b"not json"), parts) == [AUDIT], "no JSONPath matches a non-JSON body"


def test_a_notification_reports_to_nobody_and_only_the_router_made_one_is_one() -> None:
    child = fanout.notification(envelope(generation=1), AUDIT, share=2)
    assert child["message_id"] == fanout.notification_id("m1", 1, AUDIT) == "m1-n1-demo.audit"
    assert child["headers"] == {"h": "v", fanout.NOTIFY_HEADER: "m1"}, "no fan-out mark: its ending is its own"
    assert fanout.is_notification(child) and not fanout.is_delivery(child)
    assert (child["reply_to"], child["callback"], child["to_agent"]) == (None, None, AUDIT)
    forged = {**envelope(), "to_agent": AUDIT, "headers": {fanout.NOTIFY_HEADER: "other"}}
    assert not fanout.is_notification(forged)


def test_only_subscribers_with_a_ready_instance_for_the_tenant_and_version_get_it() -> None:
    parts = fanout.split(CAP, [sub("a1", AUDIT, state=AgentState.STARTING), sub("n1", NOTIFY, tenants=["other"]),
                               sub("x1", "agent://demo/x", version="2.0.0"), sub("y1", "agent://demo/y")])
    assert fanout.subscribers(envelope(capability_version="^1"), parts) == ["agent://demo/y"]
    assert fanout.subscribers(envelope(), fanout.split(CAP, [])) == []


def test_an_event_that_names_its_agent_goes_to_that_subscriber_only() -> None:
    parts = fanout.split(CAP, [sub("a1", AUDIT), sub("n1", NOTIFY)])
    assert fanout.subscribers(envelope(to_agent=NOTIFY), parts) == [NOTIFY]
    assert fanout.subscribers(envelope(to_agent="agent://demo/nobody"), parts) == []


def test_a_delivery_is_the_event_for_one_agent_with_a_derived_id_and_the_same_bytes_when_made_again() -> None:
    child = fanout.delivery(envelope(generation=2), NOTIFY)
    assert child["message_id"] == fanout.delivery_id("m1", 2, NOTIFY) == "m1-s2-demo.notify"
    assert (child["parent_id"], child["to_agent"], child["trace_id"], child["payload"]) == (
        "m1", NOTIFY, "t1", b'{"order":1}')
    assert (child["reply_to"], child["callback"]) == (None, None), "the parent answers, once"
    assert (child["generation"], child["attempt"], child["deadline"]) == (0, 1, 46_000)
    assert child["headers"] == {"h": "v", fanout.OF_HEADER: "m1"}
    assert child["idempotency_key"] == f"k1 {NOTIFY}", "each subscriber keeps its own business key"
    assert fanout.is_delivery(child) and not fanout.is_delivery(envelope())
    assert encode_dict("Envelope", child) == encode_dict("Envelope", fanout.delivery(envelope(generation=2), NOTIFY))
    assert fanout.delivery(envelope(idempotency_key=None), AUDIT)["idempotency_key"] is None


def test_agent_paths_with_dashes_and_depth_map_to_distinct_ids() -> None:
    ids = {fanout.delivery_id("m", 0, a) for a in ("agent://a/b-c", "agent://a-b/c", "agent://a/b/c")}
    assert len(ids) == 3


# -- the parent's row ---------------------------------------------------------------------------------------------

def announce(at: int = 2_000, generation: int = 0) -> Receipt:
    book = fanout.announced([AUDIT, NOTIFY], "m1", generation)
    return Receipt(message_id="m1", generation=generation, trace_id="t1", tenant="acme", capability=CAP,
                   status=Status.FANNED_OUT, at=at, deadline=46_000, delivery_timeout_ms=0, fanout=book,
                   callback='{"channel":"webhook"}')


def child_row(agent: str, status: Status, at: int, error: ErrorInfo | None = None) -> StatusRow:
    mid = fanout.delivery_id("m1", 0, agent)
    row = fold(None, Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP, status=Status.ROUTED,
                             at=at - 10, agent_id=agent, instance_id="i"))
    row, _ = fanout.settle(row, Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP,
                                        status=Status.ROUTED, at=at - 10), parent="m1")
    ending = Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP, status=status, at=at,
                     agent_id=agent if status is Status.COMPLETED else None, error=error)
    return fold(row, ending)


def told(row: StatusRow) -> Receipt:
    """The FANNED_OUT receipt a delivery's ending sends to its parent."""
    after, out = fanout.settle(row, Receipt(message_id=row.message_id, trace_id="t1", tenant="acme", capability=CAP,
                                            status=row.status, at=row.updated_at), parent=None)
    assert out is not None and out.status is Status.FANNED_OUT and out.message_id == "m1"
    assert after.fanout is not None and after.fanout.reported
    again = fanout.settle(after, Receipt(message_id=row.message_id, trace_id="t1", tenant="acme", capability=CAP,
                                         status=row.status, at=row.updated_at), parent=None)[1]
    assert again is None, "a delivery reports its ending once"
    return out


def parent_after(*receipts: Receipt) -> tuple[StatusRow, list[Receipt]]:
    row: StatusRow | None = None
    produced = []
    for receipt in receipts:
        row = fold(row, receipt)
        row, out = fanout.settle(row, receipt, parent=None)
        if out is not None:
            produced.append(out)
    assert row is not None
    return row, produced


def test_the_parent_waits_for_every_delivery_then_completes_once() -> None:
    audit, notify = told(child_row(AUDIT, Status.COMPLETED, 3_000)), told(child_row(NOTIFY, Status.COMPLETED, 4_000))
    row, produced = parent_after(announce(), audit)
    assert row.status is Status.FANNED_OUT and not row.terminal and produced == []
    assert row.fanout is not None and [d.status for d in row.fanout.deliveries] == [Status.COMPLETED, None]
    assert not due_tasks([row], 10_000), "a parent has no delivery clock: only its deadline expires it"
    row, produced = parent_after(announce(), audit, notify)
    assert [(r.status, r.at, r.callback) for r in produced] == [(Status.COMPLETED, 4_000, '{"channel":"webhook"}')]
    ended = fold(row, produced[0])
    assert ended.status is Status.COMPLETED and ended.fanout is not None and ended.fanout.settled
    assert fanout.settle(ended, produced[0], parent=None)[1] is None, "the ending is produced once"
    assert fold(ended, produced[0]) == ended, "a batch read again produces the same receipt: a duplicate"
    assert fanout.summary(ended.fanout) == "2/2 completed"


def test_a_parent_with_a_delivery_that_did_not_complete_fails_naming_it() -> None:
    letter = ErrorInfo(kind="TRANSIENT", code="RETRIES_EXHAUSTED", message="gave up")
    notify = told(child_row(NOTIFY, Status.DEAD_LETTERED, 5_000, error=letter))
    audit = told(child_row(AUDIT, Status.COMPLETED, 3_000))
    row, produced = parent_after(announce(), notify, audit)
    (ending,) = produced
    assert ending.status is Status.FAILED and ending.error is not None
    assert ending.error.code == fanout.INCOMPLETE and f"{NOTIFY} DEAD_LETTERED" in ending.error.message
    ended = fold(row, ending)
    assert ended.fanout is not None
    assert {d.agent_id: d.status for d in ended.fanout.deliveries} == {AUDIT: Status.COMPLETED,
                                                                       NOTIFY: Status.DEAD_LETTERED}
    notified = next(d for d in ended.fanout.deliveries if d.agent_id == NOTIFY)
    assert notified.error == letter and notified.at == 5_000
    assert fanout.summary(ended.fanout) == f"1/2 completed ({NOTIFY} DEAD_LETTERED)"


def test_an_agents_ending_folded_before_the_routed_that_names_the_parent_is_reported_when_it_arrives() -> None:
    mid = fanout.delivery_id("m1", 0, AUDIT)
    done = Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP, status=Status.COMPLETED, at=3_000,
                   agent_id=AUDIT, instance_id="a1")
    row, out = fanout.settle(fold(None, done), done, parent=None)
    assert out is None, "not known as a delivery yet"
    routed = Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP, status=Status.ROUTED, at=2_990,
                     agent_id=AUDIT, instance_id="a1")
    row, out = fanout.settle(fold(row, routed), routed, parent="m1")
    assert out is not None and out.fanout is not None
    assert (out.message_id, out.at, out.fanout.deliveries[0].status) == ("m1", 3_000, Status.COMPLETED)


def test_an_ending_before_the_announcement_is_kept_and_counted_once_the_router_names_them_all() -> None:
    audit, notify = told(child_row(AUDIT, Status.COMPLETED, 3_000)), told(child_row(NOTIFY, Status.COMPLETED, 4_000))
    row, produced = parent_after(audit, notify)
    assert produced == [], "not announced: the parent does not know how many deliveries there are"
    row, produced = parent_after(audit, notify, announce())
    assert [r.status for r in produced] == [Status.COMPLETED]


def test_a_replayed_parent_is_a_new_generation_with_its_own_deliveries() -> None:
    row, _ = parent_after(announce())
    replay = announce(at=9_000, generation=1)
    row = fold(row, replay)
    assert row.generation == 1 and row.fanout is not None
    assert {d.message_id for d in row.fanout.deliveries} == {"m1-s1-demo.audit", "m1-s1-demo.notify"}
    assert all(d.status is None for d in row.fanout.deliveries)


def test_the_fanout_receipt_round_trips_through_avro() -> None:
    receipt = announce()
    decoded = Receipt.model_validate(decode_dict("Receipt", encode_dict("Receipt", receipt.to_avro())))
    assert decoded == receipt


def test_a_delivery_to_a_full_subscriber_queues_where_a_request_is_shed() -> None:
    from reach.core.candidates import RouteRequest
    from reach.core.routing import Forward, Overload, decide

    full = sub("n1", NOTIFY, inflight=10, max_concurrency=10, max_queue=0)
    request = RouteRequest.from_envelope(fanout.delivery(envelope(), NOTIFY))._replace(deadline=2_100)
    shed = decide(request, [full], weights={}, now_ms=2_000)  # 100 ms of budget left: it cannot wait its turn
    assert isinstance(shed, Overload)
    queued = decide(request, [full], weights={}, now_ms=2_000, queue_when_full=True)
    assert isinstance(queued, Forward) and queued.instance.instance_id == "n1"


def test_the_deliveries_of_an_event_share_its_budget_instead_of_each_getting_all_of_it() -> None:
    """Security finding (budgets down the chain): n deliveries each carried the event's whole budget."""
    event = envelope(max_tokens=1_000, max_cost_micros=7)
    children = [fanout.delivery(event, agent, share=3) for agent in (AUDIT, NOTIFY, "agent://demo/x")]
    assert [(c["max_tokens"], c["max_cost_micros"]) for c in children] == [(333, 2)] * 3
    assert fanout.delivery(envelope(), AUDIT, share=3).get("max_tokens") is None, "no budget: none is made up"
