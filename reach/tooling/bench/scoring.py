"""Mode `scoring`: the pure scoring function (reach.core.scoring.score) alone with 10, 100 and 1,000 candidates."""

from __future__ import annotations

import random
import time

from reach.core.candidates import Candidate, RouteRequest
from reach.core.factors import DEFAULT_WEIGHTS, ScoringContext
from reach.core.loads import InstanceLoad
from reach.core.scoring import score
from reach.core.versions import parse_version
from reach.records import AgentRegistration, AgentState, Capability
from reach.tooling.bench.results import ModeResult, latency, own_cpu


def candidates(n: int) -> list[Candidate]:
    """`n` READY instances of one capability across versions, regions and loads."""
    out = []
    for i in range(n):
        version = f"1.{i % 5}.{i % 3}"
        cap = Capability(name="bench.score", version=version, tags=["a"] if i % 2 else ["a", "b"])
        reg = AgentRegistration(
            agent_id=f"agent://bench/s{i % 7}", instance_id=f"s-{i}", build_version="bench", capabilities=[cap],
            region=("eu", "us", None)[i % 3], max_concurrency=32, state=AgentState.READY, heartbeat_at=0,
            ttl_ms=60_000, assigned_partitions=[0], inbox_topic="bench.inbox",
        )
        out.append(Candidate(reg, cap, parse_version(version), load=InstanceLoad(i % 25, i % 7, 32, 128)))
    return out


def run(sizes: tuple[int, ...] = (10, 100, 1000), *, calls: int = 2_000) -> list[ModeResult]:
    request = RouteRequest(message_id="m", capability="bench.score", version_range="^1.2", region="eu",
                           session_key="s", tags=("a", "b"))
    weights, rng = DEFAULT_WEIGHTS, random.Random(7)
    none, sticky = ScoringContext(), ScoringContext(affinity={"s": "s-3"})
    results = []
    for n in sizes:
        pool = candidates(n)
        reps = calls if n <= 100 else max(calls * 100 // n, 20)
        for _ in range(max(reps // 10, 5)):  # warm-up: caches of version closeness, the interpreter's
            score(request, pool, weights, none, rng)
        samples: list[float] = []
        cpu0, wall0 = own_cpu(), time.perf_counter()
        for i in range(reps):
            t = time.perf_counter_ns()
            score(request, pool, weights, sticky if i % 4 == 0 else none, rng)
            samples.append((time.perf_counter_ns() - t) / 1e6)
        wall, cpu = time.perf_counter() - wall0, own_cpu() - cpu0
        results.append(ModeResult(
            mode=f"scoring {n}", messages=reps, throughput=reps / wall,
            latency=latency(samples, f"one score() call over {n} candidates"), cpu_per_1k=cpu / reps * 1000,
            lost=0, duplicated=0, notes="pure function, calls/s; no broker",
        ))
    return results
