"""The cost of health and canary admission in reach.core.routing.decide: µs per decision, with and without it.

Run from the repo root:  .venv/bin/python scripts/admission_cost.py [instances] [decisions]
Instances of one agent, half on a canary build; `health` marks one OPEN and one HALF_OPEN (admit 0.5).
"""

from __future__ import annotations

import random
import sys
import time

from reach.core.candidates import RouteRequest
from reach.core.routing import decide
from reach.envelopes import now_ms
from reach.records import (
    AgentRegistration,
    AgentState,
    BreakerState,
    Canary,
    Capability,
    InstanceHealth,
    Weights,
)


def registrations(n: int) -> list[AgentRegistration]:
    return [AgentRegistration(agent_id="agent://bench/a", instance_id=f"i-{i}", build_version=("1.0", "1.1")[i % 2],
                              capabilities=[Capability(name="bench.cap", version="1.0.0")], max_concurrency=32,
                              state=AgentState.READY, heartbeat_at=0, ttl_ms=60_000, assigned_partitions=[i],
                              inbox_topic="bench.agent.bench.a") for i in range(n)]


def timed_us(n: int, calls: int, modes: dict[str, dict[str, object]], rounds: int = 7) -> dict[str, float]:
    """µs per decision for each mode: the best of `rounds`, the modes interleaved so noise hits them alike."""
    regs, weights, rng, now = registrations(n), Weights(), random.Random(1), now_ms()
    requests = [RouteRequest(message_id=f"m-{i}", capability="bench.cap") for i in range(calls)]
    best = dict.fromkeys(modes, float("inf"))
    for _ in range(rounds):
        for name, kw in modes.items():
            start = time.perf_counter()
            for r in requests:
                decide(r, regs, weights=weights, now_ms=now, rng=rng, **kw)  # type: ignore[arg-type]
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    now = now_ms()
    health = {"i-0": InstanceHealth(instance_id="i-0", agent_id="agent://bench/a", at=now,
                                    breaker=BreakerState.OPEN, open_until=now + 60_000),
              "i-1": InstanceHealth(instance_id="i-1", agent_id="agent://bench/a", at=now,
                                    breaker=BreakerState.HALF_OPEN, admit=0.5)}
    canary = {"agent://bench/a": Canary(agent_id="agent://bench/a", version="1.1", steps=[20, 100],
                                        started_at=now, step_started_at=now)}
    print(f"{n} instances, {calls} decisions per round, best of 7 rounds")
    modes: dict[str, dict[str, object]] = {"plain": {}, "health": {"health": health},
                                           "health + canary": {"health": health, "canaries": canary}}
    for name, us in timed_us(n, calls, modes).items():
        print(f"  {name:<16} {us:6.1f} µs")


if __name__ == "__main__":
    main()
