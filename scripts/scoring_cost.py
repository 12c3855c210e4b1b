"""Per-request CPU of scoring 5 candidates and of writing their ROUTED receipt (timeit on process time, best of 5).

    .venv/bin/python scripts/scoring_cost.py
"""

from __future__ import annotations

import random
import time
import timeit

from reach.tooling.bench.scoring import candidates
from reach.core.candidates import RouteRequest
from reach.core.factors import DEFAULT_WEIGHTS, NAMES, ScoringContext
from reach.core.scoring import score
from reach.streams.router.routed_receipt import RoutedReceiptWriter

N = 20_000


def per_call_us(fn: object) -> float:
    return min(timeit.repeat(fn, number=N, repeat=5, timer=time.process_time)) / N * 1e6  # type: ignore[arg-type]


def main() -> None:
    pool = candidates(5)
    request = RouteRequest(message_id="m", capability="bench.score", version_range="^1.2", region="eu",
                           session_key="s", tags=("a", "b"))
    rng, context = random.Random(7), ScoringContext()
    decision = score(request, pool, DEFAULT_WEIGHTS, context, rng)
    writer = RoutedReceiptWriter.create()
    assert writer is not None, "the ROUTED writer no longer matches the codec"
    receipt = dict(message_id="01J0000000000000000000000X", generation=0, trace_id="t" * 32, tenant="default",
                   capability="bench.score", attempt=1, at=1_800_000_000_000, deadline=1_800_000_100_000,
                   delivery_timeout_ms=5000, reroutes=0, agent_id="agent://a/b", instance_id="s-1",
                   scores=decision.scores, picked_instance="s-1", topic="ns.agent.a.b", partition=3, offset=12345,
                   weights=decision.weights)
    print(f"{len(NAMES)} factors: {', '.join(NAMES)}")
    scored = per_call_us(lambda: score(request, pool, DEFAULT_WEIGHTS, context, rng))
    print(f"score() over 5 candidates: {scored:.1f} µs")
    print(f"ROUTED receipt of 5 candidates: {per_call_us(lambda: writer.encode(**receipt)):.1f} µs")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
