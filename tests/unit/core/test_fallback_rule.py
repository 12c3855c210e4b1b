"""Fallback (pure): which endings it serves, the child envelope, the chain check, and the row's bookkeeping so a
message and generation send one child, however often its receipts are folded."""

from __future__ import annotations

from functools import reduce
from typing import Any

import pytest

from reach.core import fallback
from reach.core.fallback import Ask, NotSent
from reach.core.lifecycle import FallbackRef, StatusRow, fold
from reach.kafka.codec import decode_dict, encode_dict
from reach.records import Decision, ErrorInfo, Receipt, Status

INBOX = ("ns.agent.demo.flaky", 3, 41)


def envelope(**kw: Any) -> dict[str, Any]:
    base = decode_dict("Envelope", encode_dict("Envelope", {
        "message_id": "m1", "trace_id": "t1", "parent_id": None, "tenant": "acme", "source": "app", "capability":
        "demo.flaky", "capability_version": "^1", "to_agent": "agent://demo/flaky", "payload": b'{"x":1}',
        "created_at": 1_000, "deadline": 61_000, "delivery_timeout_ms": 5_000, "execution_timeout_ms": 9_000,
        "attempt": 3, "generation": 2, "reroutes": 1, "excluded_instances": ["i9"], "idempotency_key": "k1",
        "reply_to": "ns.replies.c1", "callback": '{"channel":"webhook"}', "headers": {"h": "v"},
        "routing": {"session_key": "s1"}}))
    return {**base, **kw}


@pytest.mark.parametrize("status", list(Status))
def test_it_serves_failed_dead_lettered_and_unroutable_endings_only(status: Status) -> None:
    assert fallback.serves(status) is (status in (Status.FAILED, Status.DEAD_LETTERED, Status.UNROUTABLE))


def test_the_child_is_the_same_request_for_the_fallback_with_a_derived_id_and_the_remaining_budget() -> None:
    child = fallback.child(envelope(), fallback="demo.echo", now=5_000)
    assert isinstance(child, dict)
    assert child["message_id"] == fallback.child_id("m1", 2) == "m1-fb2"
    assert (child["trace_id"], child["parent_id"], child["capability"], child["tenant"]) == (
        "t1", "m1", "demo.echo", "acme")
    assert (child["payload"], child["deadline"], child["created_at"]) == (b'{"x":1}', 61_000, 1_000)
    assert (child["attempt"], child["generation"], child["reroutes"], child["excluded_instances"]) == (1, 0, 0, [])
    assert (child["to_agent"], child["capability_version"]) == (None, "*")
    assert (child["callback"], child["reply_to"], child["idempotency_key"]) == (
        '{"channel":"webhook"}', "ns.replies.c1", "k1")
    assert child["headers"] == {"h": "v", fallback.OF_HEADER: "m1", fallback.DEPTH_HEADER: "1"}
    assert fallback.key_of(child) == "s1"
    assert decode_dict("Envelope", encode_dict("Envelope", child))["message_id"] == "m1-fb2"
    again = fallback.child(envelope(), fallback="demo.echo", now=7_000)
    assert again == child, "built again later (a batch read again): the same message"


def test_no_child_past_the_depth_for_itself_or_with_no_budget_left() -> None:
    deep = envelope(headers={fallback.DEPTH_HEADER: str(fallback.MAX_DEPTH)})
    assert isinstance(fallback.child(deep, fallback="demo.echo", now=5_000), NotSent)
    assert fallback.child(envelope(), fallback="demo.flaky", now=5_000) == NotSent("demo.flaky is its own fallback")
    spent = fallback.child(envelope(), fallback="demo.echo", now=61_000)
    assert isinstance(spent, NotSent) and "budget is spent" in spent.reason
    bad = fallback.child(envelope(), fallback="../Not A Capability", now=5_000)
    assert isinstance(bad, NotSent) and "is not a capability name" in bad.reason, "a hand-written control record"
    second = fallback.child(envelope(headers={fallback.DEPTH_HEADER: "1"}), fallback="demo.echo", now=5_000)
    assert isinstance(second, dict) and second["headers"][fallback.DEPTH_HEADER] == "2"


def test_a_chain_that_loops_or_runs_too_long_is_refused() -> None:
    table = {"b": "c", "c": "a", "x": "y", "y": "z", "z": "w"}
    assert fallback.chain_problem("a", "b", table.get) == "the fallbacks loop: a -> b -> c -> a"
    assert fallback.chain_problem("a", "a", table.get) == "the fallbacks loop: a -> a"
    assert fallback.chain_problem("b", "a", {}.get) is None
    too_long = "the fallback chain v -> x -> y -> z -> w is longer than 3 hops"
    assert fallback.chain_problem("v", "x", table.get) == too_long
    assert fallback.chain_problem("v", "y", table.get) is None


def r(status: Status, at: int, *, generation: int = 0, **kw: Any) -> Receipt:
    return Receipt(message_id="m1", generation=generation, trace_id="t1", tenant="acme", capability="demo.flaky",
                   status=status, at=at, **kw)


ROUTED = dict(decision=Decision(topic=INBOX[0], partition=INBOX[1], offset=INBOX[2]), instance_id="i1")
BY_AGENT = dict(agent_id="agent://demo/flaky", instance_id="i1", error=ErrorInfo(kind="X", code="Y", message="no"))


def settled(*receipts: Receipt, fallback_of: Any = {"demo.flaky": "demo.echo"}.get,
            routed_child: FallbackRef | None = None) -> tuple[StatusRow, list[Ask]]:
    """Fold like the status fold: fold, then settle the fallback; collect the asks (each answered: sent)."""
    def step(acc: tuple[StatusRow | None, list[Ask]], receipt: Receipt) -> tuple[StatusRow | None, list[Ask]]:
        before, asks = acc
        after, ask = fallback.settle(before, fold(before, receipt), receipt, fallback_of=fallback_of,
                                     routed_child=routed_child if receipt.status.is_terminal else None)
        if ask is not None:
            after = fallback.sent(after, ask, {"message_id": fallback.child_id("m1", receipt.generation)})
            asks.append(ask)
        return after, asks

    row, asks = reduce(step, receipts, (None, []))
    assert row is not None
    return row, asks


def test_an_agents_ending_asks_once_for_the_envelope_it_was_handed() -> None:
    row, asks = settled(r(Status.ROUTED, 1, **ROUTED), r(Status.STARTED, 2, **BY_AGENT),
                        r(Status.DEAD_LETTERED, 3, **BY_AGENT), r(Status.DEAD_LETTERED, 3, **BY_AGENT),
                        r(Status.FAILED, 4, **BY_AGENT))  # a duplicate and a later terminal: no second ask
    assert asks == [Ask("demo.echo", INBOX)]
    assert row.fallback == FallbackRef(capability="demo.echo", message_id="m1-fb0") and row.envelope_at == INBOX


def test_an_ending_before_its_routed_receipt_waits_for_where_the_envelope_is() -> None:
    row, asks = settled(r(Status.FAILED, 2, **BY_AGENT))
    assert asks == [] and row.fallback_pending
    row, asks = settled(r(Status.FAILED, 2, **BY_AGENT), r(Status.ROUTED, 1, **ROUTED))
    assert asks == [Ask("demo.echo", INBOX)] and not row.fallback_pending and row.fallback is not None


def test_a_replay_is_a_new_generation_and_sends_its_own_child() -> None:
    row, asks = settled(r(Status.ROUTED, 1, **ROUTED), r(Status.FAILED, 2, **BY_AGENT),
                        r(Status.ROUTED, 3, generation=1, **ROUTED), r(Status.FAILED, 4, generation=1, **BY_AGENT),
                        r(Status.FAILED, 2, **BY_AGENT))  # the old generation's receipt again
    assert len(asks) == 2 and row.fallback == FallbackRef(capability="demo.echo", message_id="m1-fb1")


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.REJECTED, Status.EXPIRED, Status.CANCELED])
def test_endings_it_does_not_serve_ask_nothing(status: Status) -> None:
    row, asks = settled(r(Status.ROUTED, 1, **ROUTED), r(status, 2, **BY_AGENT))
    assert asks == [] and row.fallback is None and not row.fallback_pending


def test_no_policy_or_an_ending_nobody_ran_asks_nothing_and_the_routers_child_is_recorded() -> None:
    assert settled(r(Status.ROUTED, 1, **ROUTED), r(Status.FAILED, 2, **BY_AGENT), fallback_of=lambda _c: None)[1] == []
    row, asks = settled(r(Status.UNROUTABLE, 1))  # the router's ending: it sent the child (or none) itself
    assert asks == [] and row.fallback is None
    ref = FallbackRef(capability="demo.echo", message_id="m1-fb0")
    row, asks = settled(r(Status.UNROUTABLE, 1), routed_child=ref)
    assert asks == [] and row.fallback == ref
    assert fallback.parse_mark(fallback.mark(ref)) == ref and fallback.parse_mark("garbage") is None


def test_a_child_that_could_not_be_sent_is_named_with_why() -> None:
    row, _ = settled(r(Status.ROUTED, 1, **ROUTED), r(Status.FAILED, 2, **BY_AGENT))
    unsent = fallback.sent(row, Ask("demo.echo", INBOX), NotSent("gone"))
    assert unsent.fallback == FallbackRef(capability="demo.echo", note="gone") and not unsent.fallback_pending


def asked_then_settled(*receipts: tuple[Receipt, str | None]) -> tuple[StatusRow, list[Ask]]:
    """Fold like the status fold with the timekeeper's and delay tiers' header: asked, then settle."""
    before: StatusRow | None = None
    asks: list[Ask] = []
    for receipt, ask_header in receipts:
        after = fallback.asked(before, fold(before, receipt), receipt, ask=ask_header)
        after, ask = fallback.settle(before, after, receipt, fallback_of={"demo.flaky": "demo.echo"}.get,
                                     routed_child=None)
        if ask is not None:
            after = fallback.sent(after, ask, {"message_id": fallback.child_id("m1", receipt.generation)})
            asks.append(ask)
        before = after
    assert before is not None
    return before, asks


LATE = dict(error=ErrorInfo(kind="DELIVERY", code="RETRIES_EXHAUSTED", message="3 of 3 attempts failed"))


def test_a_timekeeper_or_delay_tier_ending_that_asks_is_sent_once_from_the_forwarded_envelope() -> None:
    row, asks = asked_then_settled((r(Status.ROUTED, 1, **ROUTED), None),
                                   (r(Status.DEAD_LETTERED, 2, **LATE), "timekeeper"),
                                   (r(Status.DEAD_LETTERED, 2, **LATE), "timekeeper"))  # a repeat asks nothing
    assert asks == [Ask("demo.echo", INBOX)] and row.fallback == FallbackRef(capability="demo.echo",
                                                                             message_id="m1-fb0")


@pytest.mark.parametrize("status", [Status.EXPIRED, Status.COMPLETED])
def test_an_ending_the_rule_does_not_serve_asks_nothing_even_when_marked(status: Status) -> None:
    row, asks = asked_then_settled((r(Status.ROUTED, 1, **ROUTED), None), (r(status, 2), "delays"))
    assert asks == [] and not row.fallback_pending


def test_a_marked_ending_with_no_forwarded_envelope_never_waits() -> None:
    row, asks = asked_then_settled((r(Status.FAILED, 1, **LATE), "timekeeper"))
    assert asks == [] and not row.fallback_pending and row.fallback is None
    unmarked, asks = asked_then_settled((r(Status.ROUTED, 1, **ROUTED), None), (r(Status.DEAD_LETTERED, 2, **LATE),
                                                                                  None))
    assert asks == [] and unmarked.fallback is None, "no header, no agent: the router's kind of ending, as before"


def test_a_fallback_child_gets_what_is_left_after_the_run_that_failed() -> None:
    """Security finding (budgets down the chain): the fallback child carried the request's whole budget although the
    run that failed had spent part of it."""
    from reach.records import Usage

    failed = fold(None, Receipt(message_id="m1", generation=2, trace_id="t1", tenant="acme", capability="demo.flaky",
                                status=Status.FAILED, at=4_000, agent_id="agent://demo/flaky",
                                usage=Usage(input_tokens=300, output_tokens=100, cost_micros=40),
                                timings={"children_input_tokens": 50, "children_cost_micros": 10, "children": 1}))
    child = fallback.child(envelope(max_tokens=1_000, max_cost_micros=45), fallback="demo.echo", now=5_000,
                           ended=failed)
    assert isinstance(child, dict) and (child["max_tokens"], child["max_cost_micros"]) == (550, 0)
    unbudgeted = fallback.child(envelope(), fallback="demo.echo", now=5_000, ended=failed)
    assert isinstance(unbudgeted, dict) and unbudgeted["max_tokens"] is None
