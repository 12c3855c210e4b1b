"""Measured cost in routing on the real broker: under a cost weight, an instance that declares itself cheap but whose
COMPLETED receipts report a higher cost per call loses to the one that declares a price between the two."""

from __future__ import annotations

from collections import Counter

import pytest

from reach.envelopes import now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import Receipt, Status, Usage
from tests.integration.router_helpers import Instance, Sender, routed_receipts, running_router, sees, wait_for
from tests.integration.test_router_routing import weights_cli

pytestmark = pytest.mark.integration


def test_observed_cost_replaces_the_declared_one_under_a_cost_weight(namespace: str) -> None:
    names = Names(namespace)
    claims_cheap = Instance(names, "claims-cheap", cost=0.001, partitions=[0])
    honest = Instance(names, "honest", cost=0.002, partitions=[1])
    for i in (claims_cheap, honest):
        i.heartbeat()
    sender = Sender(names).ensure()
    assert weights_cli("set", "--capability", "text.echo", "--cost", "2").returncode == 0
    with running_router() as router:
        wait_for(lambda: sees(router, claims_cheap) and sees(router, honest), what="both instances")
        wait_for(lambda: router.state.control.weights("text.echo")["cost"] == 2.0, what="the cost weight seen")
        declared = Counter(r.instance_id for r in routed_receipts(names, sender.many(10), router).values())
        assert declared == Counter({"claims-cheap": 10})  # declared 0.001 < 0.002
        for n in range(3):  # what its calls reported: 0.005 per call (5,000 micro-units)
            sender.producer.produce(names.receipts, key=f"paid-{n}".encode(), value=codec.encode(Receipt(
                message_id=f"paid-{n}", trace_id="t", tenant="default", capability="text.echo",
                status=Status.COMPLETED, at=now_ms(), agent_id=claims_cheap.agent_id,
                instance_id="claims-cheap", usage=Usage(input_tokens=10, cost_micros=5_000))))
            sender.producer.poll(0)
        sender.flush()
        wait_for(lambda: router.state.costs.means.get("claims-cheap") == 5_000, 30, "the observed cost")
        observed = routed_receipts(names, sender.many(10), router)
        assert {r.instance_id for r in observed.values()} == {"honest"}
        decision = next(iter(observed.values())).decision
        assert decision is not None
        assert {c.instance_id: c.parts["cost"] for c in decision.candidates} == {"honest": 1.0, "claims-cheap": 0.0}
