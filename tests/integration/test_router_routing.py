"""Routing on the real broker: load split, draining, version ranges, to_agent, affinity, factor weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from reach.core.factors import NAMES
from reach.names import Names
from reach.records import AgentState, Receipt
from reach.streams.router.route_loop import Router
from tests.integration.router_helpers import (
    Instance,
    Sender,
    routed_receipts,
    running_router,
    sees,
    wait_for,
)

pytestmark = pytest.mark.integration


def routed_to(names: Names, ids: list[str], router: Router | None = None) -> Counter[str]:
    return Counter(r.instance_id for r in routed_receipts(names, ids, router).values())


def test_a_capability_topic_created_after_the_router_started_is_routed(namespace: str) -> None:
    names = Names(namespace)
    late = Instance(names, "late-1", capability="text.late")
    late.heartbeat()
    with running_router() as router:
        wait_for(lambda: sees(router, late), what="the instance registered")
        ids = Sender(names).many(10, capability="text.late")  # creates the topic now
        assert set(routed_to(names, ids, router)) == {"late-1"}
        assert router.topics is not None and names.capability("text.late") in router.topics.subscribed
        assert router.topics.assigned > 0 and router.topics.rebalances >= 1


def test_version_range_and_to_agent(namespace: str) -> None:
    names = Names(namespace)
    old = Instance(names, "old-1", version="1.2.3")
    new = Instance(names, "new-1", version="2.0.0", agent_id="agent://echo/next")
    for i in (old, new):
        i.heartbeat()
    sender = Sender(names).ensure()  # subscribed from the start: these tests are about the routing decision
    with running_router() as router:
        wait_for(lambda: sees(router, old) and sees(router, new), what="both instances registered")
        caret = sender.many(40, version="^1.2")
        pinned = sender.many(20, to_agent="agent://echo/next")
        assert set(routed_to(names, caret, router)) == {"old-1"}
        assert set(routed_to(names, pinned, router)) == {"new-1"}


def test_session_affinity_holds_for_100_requests(namespace: str) -> None:
    names = Names(namespace)
    for n in range(3):
        Instance(names, f"i{n}", max_concurrency=1000, partitions=[n]).heartbeat()
    sender = Sender(names).ensure()  # subscribed from the start: these tests are about the routing decision
    with running_router() as router:
        wait_for(lambda: all(router.state.registration(f"i{n}") for n in range(3)), what="3 instances")
        ids = sender.many(100, session_key="session-42")
        counts = routed_to(names, ids, router)
        assert len(counts) == 1 and sum(counts.values()) == 100


def test_draining_instance_gets_nothing(namespace: str) -> None:
    names = Names(namespace)
    a = Instance(names, "a", max_concurrency=1000, partitions=[0])
    b = Instance(names, "b", max_concurrency=1000, partitions=[1])
    a.heartbeat()
    b.heartbeat()
    sender = Sender(names).ensure()  # subscribed from the start: these tests are about the routing decision
    with running_router() as router:
        wait_for(lambda: sees(router, a) and sees(router, b), what="both instances registered")
        before = routed_to(names, sender.many(60), router)
        assert before["a"] > 0 and before["b"] > 0  # equal scores: tie jitter spreads them
        b.heartbeat(state=AgentState.DRAINING)
        wait_for(lambda: sees(router, b, state=AgentState.DRAINING), what="b DRAINING seen")
        after = routed_to(names, sender.many(100), router)
        assert after == Counter({"a": 100})


def weights_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reach", "weights", *args], capture_output=True, text=True,
                          env=dict(os.environ), cwd=Path(__file__).resolve().parents[2], timeout=60)


def routed(names: Names, ids: list[str], router: Router | None = None) -> dict[str, Receipt]:
    return routed_receipts(names, ids, router)


def test_a_cost_weight_set_through_the_cli_routes_to_the_cheaper_instance(namespace: str) -> None:
    names = Names(namespace)
    cheap = Instance(names, "cheap", cost=1.0, partitions=[0])
    dear = Instance(names, "dear", cost=3.0, partitions=[1])
    for i in (cheap, dear):
        i.heartbeat()
    sender = Sender(names).ensure()  # subscribed from the start: these tests are about the routing decision
    with running_router() as router:
        wait_for(lambda: sees(router, cheap, cost=1.0) and sees(router, dear, cost=3.0), what="both instances")
        before = Counter(r.instance_id for r in routed(names, sender.many(40), router).values())
        assert before["cheap"] > 0 and before["dear"] > 0  # cost weighs 0 by default: equal scores, tie jitter
        cli = weights_cli("set", "--capability", "text.echo", "--cost", "2", "--json")
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["cost"] == 2.0
        shown = json.loads(weights_cli("show", "--capability", "text.echo", "--json").stdout)["text.echo"]
        assert shown["from"]["cost"] == "text.echo" and shown["cost"] == 2.0 and shown["from_scope"] == "text.echo"
        wait_for(lambda: router.state.control.weights("text.echo")["cost"] == 2.0, what="the cost weight seen")
        after = routed(names, sender.many(40), router)
        assert {r.instance_id for r in after.values()} == {"cheap"}
        decision = next(iter(after.values())).decision
        assert decision is not None and decision.weights["cost"] == 2.0 and decision.weights["fit"] == 0.4
        parts = {c.instance_id: c.parts for c in decision.candidates}
        assert parts["cheap"]["cost"] == 1.0 and parts["dear"]["cost"] == 0.0
        assert tuple(parts["cheap"]) == NAMES
        by = {c.instance_id: c for c in decision.candidates}
        assert by["cheap"].score - by["dear"].score == pytest.approx(2.0, abs=0.05)  # the cost term (load may differ)


def test_the_priority_health_preset_sends_urgent_requests_to_the_urgent_class(namespace: str) -> None:
    names = Names(namespace)
    standard = Instance(names, "standard", partitions=[0])
    urgent = Instance(names, "urgent", priority_class=5, partitions=[1])
    for i in (standard, urgent):
        i.heartbeat()
    sender = Sender(names).ensure()  # subscribed from the start: these tests are about the routing decision
    with running_router() as router:
        wait_for(lambda: sees(router, standard) and sees(router, urgent, priority_class=5), what="both instances")
        cli = weights_cli("set", "--preset", "priority-health")
        assert cli.returncode == 0, cli.stderr
        wait_for(lambda: router.state.control.weights("text.echo")["priority"] == 0.4, what="the preset seen")
        hurried = routed(names, sender.many(20, priority=5), router)
        calm = routed(names, sender.many(20), router)
        assert {r.instance_id for r in hurried.values()} == {"urgent"}
        assert {r.instance_id for r in calm.values()} == {"standard"}
        decision = next(iter(hurried.values())).decision
        assert decision is not None and decision.weights["priority"] == 0.4 and decision.weights["fit"] == 0.0
        assert {c.instance_id: c.parts["priority"] for c in decision.candidates} == {"urgent": 1.0,
                                                                                      "standard": 1 / 6}
