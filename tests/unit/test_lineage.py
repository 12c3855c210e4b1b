"""A child sent from a handler inherits from its run (reach.lineage): the parent's id and trace, its deadline at
the latest, what is left of its budget after its own reports and its ended children; outside a handler nothing."""

from __future__ import annotations

import contextvars
import threading

from reach import lineage
from reach.agent import Context
from reach.client import Client
from reach.envelopes import new_envelope
from reach.records import Receipt, Status, Usage
from reach.settings import KafkaSettings, ReachSettings


def client() -> Client:
    return Client(kafka=KafkaSettings(bootstrap="memory://lineage"), settings=ReachSettings(),
                  follow_control=False)


def ended(child: str, tokens: int, *, status: Status = Status.COMPLETED) -> Receipt:
    return Receipt(message_id=child, trace_id="t", tenant="default", capability="c.child", status=status, at=1,
                   usage=Usage(input_tokens=tokens, output_tokens=0))


def test_a_child_sent_from_a_handler_inherits_id_trace_deadline_and_the_rest_of_the_budget() -> None:
    parent = new_envelope("c.parent", {}, max_tokens=250, budget_ms=10_000)
    ctx = Context(envelope=parent, agent_id="agent://t/a", instance_id="i")
    sdk = client()
    assert sdk.envelope("c.child", {}).parent_id is None  # outside a handler: as always
    ctx.usage(input_tokens=100, output_tokens=50)
    with lineage.running(ctx._lineage()):
        child = sdk.envelope("c.child", {}, budget_ms=60_000)
        assert (child.parent_id, child.trace_id, child.max_tokens) == (parent.message_id, parent.trace_id, 100)
        assert child.deadline <= parent.deadline
        lineage.child_ended(ended(child.message_id, 60))
        lineage.child_ended(ended("running", 999, status=Status.STARTED))  # not ended: counts for nothing
        assert ctx.budget_left == {"max_tokens": 40}
        # a sync handler's thread runs in a copy of the context: it sees the same run
        seen: list[int | None] = []
        copied = contextvars.copy_context()
        thread = threading.Thread(target=lambda: copied.run(lambda: seen.append(sdk.envelope("c.x", {}).max_tokens)))
        thread.start()
        thread.join()
        assert seen == [40]
        lineage.child_ended(ended("c2", 100))
        assert sdk.envelope("c.child", {}).max_tokens == 0  # nothing left: the router ends it BUDGET_EXCEEDED
    assert ctx._lineage().children.calls == 2 and ctx._lineage().children.tokens == 160
    assert lineage.current() is None and ctx.budget_left == {"max_tokens": 0}


def test_client_publish_drops_reach_headers_a_caller_put_on_its_own_envelope() -> None:
    """Security finding (forged fan-out parent): `Client.publish` of an envelope the caller built (a handler, an SDK
    program) keeps no `reach-*` mark its id does not prove; a derived delivery (a dead letter replayed) keeps its."""
    from reach.core import fanout
    from reach.kafka import codec
    from reach.records import Envelope
    from tests.unit.streams.kafka_fakes import FakeProducer

    class Delivering(FakeProducer):
        def poll(self, _timeout: float = 0) -> int:
            self.flush()
            return 0

    sdk, producer = client(), Delivering()
    sdk._producer = producer  # type: ignore[assignment]
    forged = new_envelope("demo.echo", {}).model_copy(update={"headers": {fanout.OF_HEADER: "victim", "x": "1"}})
    made = new_envelope("demo.echo", {}, to_agent="agent://demo/a")
    made = made.model_copy(update={"message_id": fanout.delivery_id("m1", 0, "agent://demo/a"),
                                   "headers": {fanout.OF_HEADER: "m1"}})
    topic = sdk.names.capability("demo.echo")
    sdk._topics.add(topic)
    from reach.core.turns import PREFER_HEADER, TURNS_HEADER

    turn = {TURNS_HEADER: "[]", PREFER_HEADER: "i1"}  # a next turn (reach.ops.turns): its own message's marks
    sdk.publish(forged)
    sdk.publish(made)
    sdk.publish(new_envelope("demo.echo", {}).model_copy(update={"headers": turn}))
    assert [codec.decode(v, Envelope).headers for _t, v, _k in producer.sent] == [
        {"x": "1"}, {fanout.OF_HEADER: "m1"}, turn]


def test_children_in_flight_hold_what_they_were_given_so_parallel_children_never_share_a_rest() -> None:
    """Security finding (budgets down the chain): n children sent at once each got the whole rest (overspend by up
    to n-1 children); now each holds its grant until its terminal receipt, then its real spend counts instead."""
    parent = new_envelope("c.parent", {}, max_tokens=100, max_cost_micros=1_000, budget_ms=10_000)
    ctx = Context(envelope=parent, agent_id="agent://t/a", instance_id="i")
    sdk = client()
    with lineage.running(ctx._lineage()):
        first = sdk.envelope("c.child", {}, max_tokens=60)
        second = sdk.envelope("c.child", {})
        third = sdk.envelope("c.child", {})
        assert [(c.max_tokens, c.max_cost_micros) for c in (first, second, third)] == [
            (60, 1_000), (40, 0), (0, 0)], "the rest is shared, not given to each"
        assert ctx.budget_left == {"max_tokens": 0, "max_cost_micros": 0}
        lineage.child_ended(ended(first.message_id, 25))  # it spent 25 of its 60: 35 come back
        assert ctx.budget_left == {"max_tokens": 35, "max_cost_micros": 1_000}
        lineage.child_ended(ended(second.message_id, 0))
        assert ctx.budget_left == {"max_tokens": 75, "max_cost_micros": 1_000}


def test_children_sent_from_many_threads_at_once_are_given_no_more_than_the_rest() -> None:
    parent = new_envelope("c.parent", {}, max_tokens=1_000, budget_ms=10_000)
    ctx = Context(envelope=parent, agent_id="agent://t/a", instance_id="i")
    sdk, given, start = client(), [], threading.Barrier(8)

    def send() -> None:
        start.wait()
        given.extend(sdk.envelope("c.child", {}, max_tokens=300).max_tokens for _ in range(3))

    with lineage.running(ctx._lineage()):
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(send,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(given) == 24 and sorted(given, reverse=True)[:5] == [300, 300, 300, 100, 0], given


def test_a_child_never_outlives_its_parents_deadline_even_when_built_a_millisecond_later() -> None:
    parent = new_envelope("c.parent", {}, budget_ms=10_000)
    ctx = Context(envelope=parent, agent_id="agent://t/a", instance_id="i")
    with lineage.running(ctx._lineage()):
        child = ctx._lineage().child({"budget_ms": 60_000}, lambda f: new_envelope(
            "c.child", {}, **{**f, "budget_ms": f["budget_ms"] + 5}), now_ms=parent.created_at, default_budget_ms=1)
    assert child.deadline == parent.deadline
