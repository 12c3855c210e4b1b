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
