"""First terminal wins on the real broker and Redis: a record the router reads again after an agent COMPLETED
it (a crash or rebalance before the commit) is decided again, EXPIRED or NO_ROUTE this time. Without the fence
that is a second, different terminal; with it the router republishes the agent's COMPLETED (and no dead letter)."""

from __future__ import annotations

from typing import Any

import pytest

from reach.agent import Agent
from reach.envelopes import new_envelope, now_ms, routing_key
from reach.kafka import codec
from reach.names import Names
from reach.records import Envelope, Receipt
from reach.settings import RedisSettings
from reach.terminals import Fence, RedisSlots, Terminal, fence_from_settings
from tests.integration.agent_support import running
from tests.integration.router_helpers import Sender, Tail, dlq_tail, receipts_tail, running_router, wait_for

pytestmark = pytest.mark.integration
CAPABILITY = "test.fence"


def terminals(tail: Tail, message_id: str) -> list[Receipt]:
    return [r for r in tail.poll() if r.message_id == message_id and r.status.is_terminal]


def outcomes(receipts: list[Receipt]) -> set[tuple[str, str | None]]:
    """What the fault suite compares: the distinct (status, error code) terminals of one message."""
    return {(r.status.value, r.error.code if r.error else None) for r in receipts}


def test_a_stale_reread_of_a_completed_message_ends_it_once(namespace: str) -> None:
    names = Names(namespace)
    agent = Agent("agent://test/fence", ttl_ms=3000, max_concurrency=4, lease_margin_ms=500)

    @agent.capability(CAPABILITY, version="1.0.0", input_schema={"type": "object"})
    def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    sender = Sender(names).ensure(CAPABILITY)  # subscribed from the router's start
    topic = names.capability(CAPABILITY)
    raw: dict[str, bytes] = {}

    def read_again(envelope: Envelope) -> None:  # the very bytes the router routed, as a re-read sees them
        sender.raw(topic, routing_key(envelope), raw[envelope.message_id])
        sender.flush()

    tail = receipts_tail(names)
    with running_router() as router:
        assert router.fence.enabled, "REACH_REDIS_URL is set: the router fences its terminals"
        with running(agent):
            wait_for(lambda: any(r.agent_id == agent.agent_id for r in router.state.live(now_ms())), 30,
                     "the agent registered")
            # Two with a short budget (spent when read again: EXPIRED), one parked (read again once nobody serves
            # it: NO_ROUTE with a dead letter, expire_at being ahead). Made now: a budget that started before the
            # router and the agent were up could be spent at the first read.
            unfenced, fenced = (new_envelope(CAPABILITY, {"n": n}, budget_ms=3_000) for n in (1, 2))
            parked = new_envelope(CAPABILITY, {"n": 3}, expire_at=now_ms() + 120_000)
            raw.update({e.message_id: codec.encode(e) for e in (unfenced, fenced, parked)})
            for envelope in (unfenced, fenced, parked):
                read_again(envelope)
            for envelope in (unfenced, fenced, parked):
                tail.until(lambda _r, m=envelope.message_id: terminals(tail, m), 30, f"{envelope.message_id} ended")
                assert outcomes(terminals(tail, envelope.message_id)) == {("COMPLETED", None)}
            wait_for(lambda: now_ms() > max(unfenced.deadline, fenced.deadline), 10, "the short budgets spent")

            real, router.fence = router.fence, Fence(None, writer="router")  # as before the fence
            read_again(unfenced)
            tail.until(lambda _r: len(terminals(tail, unfenced.message_id)) == 2, 30, "the re-read decided")
            assert outcomes(terminals(tail, unfenced.message_id)) == {("COMPLETED", None),
                                                                      ("EXPIRED", "BUDGET_SPENT")}, "reproduced"

            router.fence = real
            read_again(fenced)
            tail.until(lambda _r: len(terminals(tail, fenced.message_id)) == 2, 30, "the re-read decided")
            first, again = terminals(tail, fenced.message_id)
            assert outcomes([first, again]) == {("COMPLETED", None)}, "one terminal outcome: the first"
            assert again == first, "the agent's own receipt, republished"
        # the agent left (its tombstone): a re-read of the parked one finds nobody serving the capability
        wait_for(lambda: not router.state.capabilities(now_ms()) & {CAPABILITY}, 30, "the agent gone")
        letters = dlq_tail(names)
        read_again(parked)
        tail.until(lambda _r: len(terminals(tail, parked.message_id)) == 2, 30, "the re-read decided")
        assert outcomes(terminals(tail, parked.message_id)) == {("COMPLETED", None)}
        assert router.stats.snapshot().totals["superseded"] == 2
        assert not [d for d in letters.poll() if d.message_id == parked.message_id], "no dead letter"
        letters.close()
    tail.close()


def test_the_redis_register_keeps_the_first_claim_and_shares_it_with_the_agents(namespace: str) -> None:
    slots = RedisSlots.from_url(RedisSettings().url(), namespace=namespace, ttl_s=60)
    assert slots.claim([Terminal("m1", 0, b"first"), Terminal("m1", 0, b"second"), Terminal("m2", 0, b"other")]) \
        == [None, b"first", None], "one script call: the first of the batch wins, a later one gets its bytes"
    assert slots.claim([Terminal("m1", 0, b"late")]) == [b"first"]
    assert slots.peek([("m1", 0), ("m1", 1)]) == [b"first", None]
    fence = fence_from_settings("test", namespace=namespace, redis_settings=RedisSettings())
    assert fence.enabled and not fence.claim([Terminal("m2", 0, b"x")])[0].won
