"""CPU per envelope of the router's batch path (`Router._process`), in process, on the unit tests' in-memory fakes.

The fleet of `reach bench --modes route` (15 READY instances of 3 capabilities, 5 each) is registered in the router's
state; `--envelopes` valid envelopes (the bench's shape: a deadline, an idempotency key, no session) cycle over the
three capabilities and are routed `--batch` at a time. Every one is forwarded with its ROUTED receipt. The producer is
the fake of tests/unit/streams/kafka_fakes.py (delivers on flush), the terminal register in memory: what is measured
is decoding, deciding, encoding and the ack ledger, not the broker. `time.process_time()` around each `_process`.

    .venv/bin/python scripts/router_cost.py [--envelopes 4000] [--batch 100] [--repeats 3] [--src DIR] [--profile]

`--src DIR` runs the router from another source tree (e.g. `git archive <commit> | tar -x -C DIR`), for a before/after
comparison with the same driver. `--profile` prints cProfile's top functions by own time instead of the figure.
Prints one JSON line: the best of `--repeats` runs (each with a fresh router) and every run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=4_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", type=Path, default=None, help="run the router from this source tree")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top 30 by own time")
    args = parser.parse_args()
    src = (args.src or ROOT).resolve()
    sys.path[:0] = [str(src), str(ROOT)]  # the router from `src`; the unit tests' fakes from this tree
    os.environ.setdefault("REACH_NAMESPACE", "cost")
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        measure(args.envelopes, args.batch, profiler)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return
    runs = [measure(args.envelopes, args.batch) for _ in range(args.repeats)]
    import reach

    print(json.dumps({"src": str(Path(reach.__file__).parents[1]), "envelopes": args.envelopes, "batch": args.batch,
                      "us_per_envelope": min(runs), "runs": runs, "load_avg_1m": round(os.getloadavg()[0], 2)}))


def measure(count: int, size: int, profiler: Any = None) -> float:
    from reach.envelopes import new_envelope, now_ms
    from reach.intent.unroutable import IntentHandoff
    from reach.kafka import codec
    from reach.names import Names
    from reach.records import AgentRegistration, AgentState, Capability, Receipt, Status
    from reach.settings import KafkaSettings, ReachSettings, RedisSettings
    from reach.streams.router.route_loop import Router
    from reach.terminals import Fence, MemorySlots
    from tests.unit.streams import kafka_fakes
    from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer

    names = Names(os.environ["REACH_NAMESPACE"])
    router = Router(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(),
                    fence=Fence(MemorySlots(), writer="router"), handoff=IntentHandoff())
    capabilities = ("bench.alpha", "bench.beta", "bench.gamma")
    for cap in capabilities:
        agent_id = f"agent://bench/{cap.split('.')[1]}"
        for i in range(5):
            router.state.apply_registration(f"{cap}-{i}", AgentRegistration(
                agent_id=agent_id, instance_id=f"{cap}-{i}", build_version="bench",
                capabilities=[Capability(name=cap, version="1.0.0")], region="eu" if i % 2 else "us",
                max_concurrency=10**9, state=AgentState.READY, heartbeat_at=now_ms(), ttl_ms=600_000,
                assigned_partitions=[i, i + 5], inbox_topic=names.inbox(agent_id)))
    messages = []
    for n in range(count):
        cap = capabilities[n % 3]
        value = codec.encode(new_envelope(cap, {"n": n}))
        messages.append(FakeMessage(names.capability(cap), n % 4, n // 4, value, str(n).encode(), []))
    batches = [messages[i:i + size] for i in range(0, count, size)]
    producer = FakeProducer()
    cpu = 0.0
    for batch in batches:
        if profiler is not None:
            profiler.enable()
        started = time.process_time()
        if hasattr(kafka_fakes, "settle"):  # the router on reach.kafka.worker (decision 0063)
            kafka_fakes.settle(router, batch, producer)
        else:  # an older tree (--src): its own batch step
            router._process(batch, producer)  # type: ignore[attr-defined]
        cpu += time.process_time() - started
        if profiler is not None:
            profiler.disable()
    routed = [codec.decode(v, Receipt) for v in producer.to(names.receipts)]
    assert len(routed) == count and all(r.status is Status.ROUTED for r in routed), "not every envelope was routed"
    return round(cpu / count * 1e6, 1)


if __name__ == "__main__":
    main()
