"""A router's commits on a timer (decision 0070) never end a message twice: on the real broker and Redis, a router
stopped as by SIGKILL (no final commit) after routing and its agent completing a batch of requests leaves them
uncommitted; the next router reads every one of them again and decides each again (forwarded to the agent, or
EXPIRED once its budget is spent). Each message still has one terminal outcome, the agent's COMPLETED, and its
handler ran once: the re-read forwards meet the agent's result cache, the re-read endings the first-terminal
register (reach.terminals). A commit cadence only changes how many inputs a crash leaves to read again."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from reach.agent import Agent
from reach.envelopes import new_envelope, now_ms
from reach.intent.unroutable import IntentHandoff
from reach.kafka import clients
from reach.names import Names
from reach.records import Receipt
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.router import route_loop
from reach.streams.router.route_loop import Router
from tests.integration.agent_support import running
from tests.integration.router_helpers import Sender, Tail, receipts_tail, wait_for

pytestmark = pytest.mark.integration
CAPABILITY = "test.cadence"
N = 12


def _router() -> Router:
    return Router(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(), handoff=IntentHandoff(),
                  metadata_refresh_ms=1000)


def _terminals(tail: Tail, ids: set[str]) -> dict[str, list[Receipt]]:
    found: dict[str, list[Receipt]] = {m: [] for m in ids}
    for r in tail.poll():
        if r.message_id in ids and r.status.is_terminal:
            found[r.message_id].append(r)
    return found


def test_a_router_killed_between_timed_commits_reads_again_and_ends_each_message_once(
        namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    names = Names(namespace)
    calls: collections.Counter[str] = collections.Counter()
    agent = Agent("agent://test/cadence", ttl_ms=3000, max_concurrency=4, lease_margin_ms=500)

    @agent.capability(CAPABILITY, version="1.0.0", input_schema={"type": "object"})
    def echo(payload: dict[str, Any]) -> dict[str, Any]:
        calls[str(payload["n"])] += 1
        return payload

    sender = Sender(names).ensure(CAPABILITY)
    tail = receipts_tail(names)
    # a cadence far longer than the run: after the first commit, none goes out on the timer
    monkeypatch.setattr(route_loop, "COMMIT_EVERY_S", 3600.0)
    first = _router()
    first.start(ready_timeout=30)
    stopped = False
    try:
        with running(agent):
            wait_for(lambda: any(r.agent_id == agent.agent_id for r in first.state.live(now_ms())), 30,
                     "the agent registered")
            primer = sender.send(new_envelope(CAPABILITY, {"n": -1}))  # takes the first (immediate) commit
            sender.flush()
            tail.until(lambda _r: _terminals(tail, {primer})[primer], 30, "the primer ended")
            # half spend their budget before the re-read (EXPIRED when decided again), half are forwarded again
            envelopes = [new_envelope(CAPABILITY, {"n": n}, budget_ms=3_000 if n % 2 else 120_000) for n in range(N)]
            ids = {sender.send(e) for e in envelopes}
            sender.flush()
            tail.until(lambda _r: all(_terminals(tail, ids).values()), 60, "every request ended")
            with monkeypatch.context() as killed:  # stopped as by SIGKILL: no final commit
                killed.setattr(clients, "commit_now", lambda *_a, **_k: None)
                first.stop()
                stopped = True
            wait_for(lambda: now_ms() > max(e.deadline for e in envelopes if e.deadline < now_ms() + 60_000), 10,
                     "the short budgets spent")
            second = _router()
            second.start(ready_timeout=30)
            try:
                tail.until(lambda _r: all(len(t) >= 2 for t in _terminals(tail, ids).values()), 60,
                           "every request read again and decided again")
            finally:
                second.stop()
    finally:
        if not stopped:
            first.stop()
        tail.close()
    outcomes: dict[str, set[tuple[str, str | None]]] = collections.defaultdict(set)
    for r in tail.records:
        if r.message_id in ids and r.status.is_terminal:
            outcomes[r.message_id].add((r.status.value, r.error.code if r.error else None))
    assert outcomes == {m: {("COMPLETED", None)} for m in ids}, "one terminal outcome per message: the agent's"
    assert all(calls[str(n)] == 1 for n in range(N)), f"each handler ran once: {dict(calls)}"
