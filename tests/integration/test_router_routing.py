"""Routing on the real broker: load split, draining, version ranges, to_agent, affinity."""

from __future__ import annotations

from collections import Counter

import pytest

from reach.names import Names
from reach.records import AgentState, Status
from tests.integration.router_helpers import (
    Instance,
    Sender,
    first_per_message,
    receipts_tail,
    running_router,
    sees,
    wait_for,
)

pytestmark = pytest.mark.integration


def routed_to(names: Names, ids: list[str]) -> Counter[str]:
    tail = receipts_tail(names)
    try:
        got = tail.until(lambda rs: len(first_per_message(rs, ids, {Status.ROUTED})) == len(ids) and rs,
                         what=f"{len(ids)} ROUTED receipts")
        routed = first_per_message(got, ids, {Status.ROUTED})
        return Counter(r.instance_id for r in routed.values())
    finally:
        tail.close()


def test_version_range_and_to_agent(namespace: str) -> None:
    names = Names(namespace)
    old = Instance(names, "old-1", version="1.2.3")
    new = Instance(names, "new-1", version="2.0.0", agent_id="agent://echo/next")
    for i in (old, new):
        i.heartbeat()
    sender = Sender(names)
    with running_router() as router:
        wait_for(lambda: sees(router, old) and sees(router, new), what="both instances registered")
        caret = sender.many(40, version="^1.2")
        pinned = sender.many(20, to_agent="agent://echo/next")
        assert set(routed_to(names, caret)) == {"old-1"}
        assert set(routed_to(names, pinned)) == {"new-1"}


def test_session_affinity_holds_for_100_requests(namespace: str) -> None:
    names = Names(namespace)
    for n in range(3):
        Instance(names, f"i{n}", max_concurrency=1000, partitions=[n]).heartbeat()
    sender = Sender(names)
    with running_router() as router:
        wait_for(lambda: all(router.state.registration(f"i{n}") for n in range(3)), what="3 instances")
        ids = sender.many(100, session_key="session-42")
        counts = routed_to(names, ids)
        assert len(counts) == 1 and sum(counts.values()) == 100


def test_draining_instance_gets_nothing(namespace: str) -> None:
    names = Names(namespace)
    a = Instance(names, "a", max_concurrency=1000, partitions=[0])
    b = Instance(names, "b", max_concurrency=1000, partitions=[1])
    a.heartbeat()
    b.heartbeat()
    sender = Sender(names)
    with running_router() as router:
        wait_for(lambda: sees(router, a) and sees(router, b), what="both instances registered")
        before = routed_to(names, sender.many(60))
        assert before["a"] > 0 and before["b"] > 0  # equal scores: tie jitter spreads them
        b.heartbeat(state=AgentState.DRAINING)
        wait_for(lambda: sees(router, b, state=AgentState.DRAINING), what="b DRAINING seen")
        after = routed_to(names, sender.many(100))
        assert after == Counter({"a": 100})
