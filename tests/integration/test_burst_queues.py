"""A burst queues, it is not shed (decision 0061), on the real broker with the whole `reach router` (hot path,
status table, timekeeper): a burst of twenty times what the instance runs at once, offered within two seconds, ends
COMPLETED, each request routed once (no reroute for waiting in the queue); a request whose budget the queue cannot
meet ends FAILED / OVERLOAD with a retry hint.

The sender paces the burst (that is the offered load, not a wait); every wait for an outcome is bounded polling.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, cast

import pytest

from reach.client import Client
from reach.records import Receipt, Status
from tests.integration.agent_support import Receipts, spawn, wait_for
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.serial  # a queue of 80 half-second runs: a starved agent changes the story

SLOW = "agent://test/slow"
BURST = 80
"""Twenty times the slow agent's max_concurrency (4), offered within BURST_S: at 0.5 s a run it drains 8/s, so the
last request waits ~10 s in the queue, twice the default delivery timeout (5 s)."""
BURST_S = 2.0
RUN_S = 0.5


def _terminal(receipts: list[Receipt]) -> Receipt | None:
    return next((r for r in receipts if r.status.is_terminal), None)


def test_a_burst_queues_and_completes_and_only_a_budget_the_queue_cannot_meet_is_shed(
        namespace: str, stream_app: StreamApp) -> None:
    slow = spawn("tests.integration.slow_agent:agent")
    try:
        agents = lambda: cast(list[dict[str, Any]], stream_app.get("/agents"))  # noqa: E731
        wait_for(lambda: any(a["agent_id"] == SLOW and a["state"] == "READY" for a in agents()), 60, "slow agent READY")
        receipts = Receipts(f"{namespace}.receipts")
        with Client() as client:
            # READY is the heartbeat, not the consumer's assignment: one request first, so the burst is not spent
            # waiting for the agent to join its group
            assert client.invoke("test.slow", {"n": -1}, timeout_ms=60_000)["n"] == -1
            ids: list[str] = []
            start = time.monotonic()
            for i in range(BURST):
                ahead = start + i * BURST_S / BURST - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)  # pacing the offered load
                ids.append(client.send("test.slow", {"n": i, "slow": RUN_S}))  # the default budget: 45 s
            # the queue now holds tens of half-second runs: a 1 s budget cannot be met
            hurried = client.send("test.slow", {"n": BURST, "slow": RUN_S}, budget_ms=1_000)

        def ended() -> dict[str, list[Receipt]] | None:
            seen = receipts.by_message()
            return seen if all(_terminal(seen.get(m, [])) for m in [*ids, hurried]) else None

        seen = wait_for(ended, 120, "a terminal receipt for every request")
    finally:
        slow.terminate()
        slow.wait(60)
    outcomes = Counter((t.status, t.error.code if t.error else None)
                       for t in (_terminal(seen[m]) for m in ids) if t is not None)
    assert outcomes == {(Status.COMPLETED, None): BURST}, outcomes
    routed = Counter(sum(1 for r in seen[m] if r.status is Status.ROUTED) for m in ids)
    twice = [[(r.status.value, r.at, r.delivery_timeout_ms, r.error.code if r.error else None) for r in seen[m]]
             for m in ids if sum(1 for r in seen[m] if r.status is Status.ROUTED) > 1]
    assert routed == {1: BURST}, f"routed once each, never rerouted for waiting in the queue: {routed} {twice[:2]}"
    late = [r for m in ids for r in seen[m] if r.error is not None and r.error.code == "DELIVERY_TIMEOUT"]
    assert not late, late[:2]
    shed = _terminal(seen[hurried])
    assert shed is not None and shed.status is Status.FAILED and shed.error is not None, shed
    assert shed.error.code == "OVERLOAD" and shed.retry_after_ms is not None and shed.retry_after_ms > 0, shed
    # what the decision record reports: ROUTED -> COMPLETED, and the longest delivery timeout a ROUTED receipt got
    latency = sorted(_terminal(seen[m]).at - next(r.at for r in seen[m] if r.status is Status.ROUTED)  # type: ignore[union-attr]
                     for m in ids)
    stretched = max(r.delivery_timeout_ms or 0 for m in ids for r in seen[m] if r.status is Status.ROUTED)
    own = sum(1 for m in ids for r in seen[m] if r.status is Status.ROUTED and r.delivery_timeout_ms == 5_000)
    print(f"burst {BURST} in {BURST_S} s: {dict(outcomes)}; routed -> COMPLETED p50 {latency[len(latency) // 2]} ms, "
          f"max {latency[-1]} ms; longest ROUTED delivery timeout {stretched} ms, {own} kept their own; "
          f"hurried: {shed.error.code}, retry_after_ms {shed.retry_after_ms}")
