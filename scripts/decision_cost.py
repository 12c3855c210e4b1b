"""The router's per-request work over a registered fleet, with a heartbeat applied before every decision.

N instances (one per agent, `agent://swarm/a<i>`) serve N / per-capability capabilities, all READY; each of `--calls`
requests re-applies one instance's registration with a fresh heartbeat_at (what a fleet heartbeating thousands of
times a second does between the router's batches), then times what the router does per batch for one request: the
route table at now (reach.streams.router.routetable), the loads the decision reads, and `reach.core.routing.decide`
over the capability's candidates; and the heartbeat itself as the router's state loop takes it (decode the Avro
record, apply it to the views). Wall time and the thread's CPU time (on a shared machine the wall time also counts
waits for a core); the first tenth of the calls warms caches and is left out.

    .venv/bin/python scripts/decision_cost.py [--instances 1200] [--per-capability 10] [--calls 3000] [--src DIR]

`--src DIR` runs another source tree (`git archive <commit> | tar -x -C DIR`) with the same driver: a tree without
`LoadTracker.on_demand` reads every live instance's load, as the router of that tree does. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1200)
    parser.add_argument("--per-capability", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--src", default=None)
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    from reach.core import routing
    from reach.core.candidates import RouteRequest
    from reach.envelopes import now_ms
    from reach.records import AgentRegistration, AgentState, Capability
    from reach.streams.router.routetable import RouteTables
    from reach.streams.router.state import RouterState

    n, caps = args.instances, max(1, args.instances // args.per_capability)
    now = now_ms()
    regs = [AgentRegistration(
        agent_id=f"agent://swarm/a{i:04d}", instance_id=f"i{i}", build_version="b", region="local",
        capabilities=[Capability(name=f"swarm.c{i % caps:03d}", version="1.0.0")], max_concurrency=4,
        state=AgentState.READY, heartbeat_at=now, ttl_ms=15_000, assigned_partitions=[0],
        inbox_topic=f"ns.agent.swarm.a{i:04d}") for i in range(n)]
    state = RouterState()
    for reg in regs:
        state.apply_registration(reg.instance_id, reg)
    from reach.kafka import codec

    tables, rng = RouteTables(state), random.Random(7)
    beats: list[float] = []  # a heartbeat as the router's state loop takes it: decode the record, apply it
    on_demand = hasattr(state.loads, "on_demand")
    wall: list[float] = []
    cpu: list[float] = []
    for i in range(args.calls):
        record = codec.encode(regs[i % n].model_copy(update={"heartbeat_at": now_ms()}))
        h = time.thread_time_ns()
        beat = codec.decode(record, AgentRegistration)
        state.apply_registration(beat.instance_id, beat)
        beats.append((time.thread_time_ns() - h) / 1e6)
        cap, t = f"swarm.c{i % caps:03d}", now_ms()
        w, c = time.perf_counter_ns(), time.thread_time_ns()
        table = tables.at(t)
        loads = (state.loads.on_demand(table.live_by_id, now_ms=t) if on_demand
                 else state.loads.view(table.live, now_ms=t))
        routing.decide(RouteRequest(message_id=str(i), capability=cap), table.by_capability.get(cap, ()),
                       weights=table.settings_of(state, cap)[0], now_ms=t, loads=loads, disabled=table.disabled,
                       health=state.health, rng=rng)
        if i >= args.calls // 10:
            wall.append((time.perf_counter_ns() - w) / 1e6)
            cpu.append((time.thread_time_ns() - c) / 1e6)

    def pct(values: list[float], q: float) -> float:
        return round(sorted(values)[min(int(len(values) * q), len(values) - 1)], 4)

    print(json.dumps({"instances": n, "per_capability": args.per_capability, "calls": len(wall),
                      "src": args.src or "this tree", "on_demand_loads": on_demand,
                      "wall_p50_ms": pct(wall, 0.5), "wall_p99_ms": pct(wall, 0.99),
                      "cpu_p50_ms": pct(cpu, 0.5), "cpu_p99_ms": pct(cpu, 0.99),
                      "heartbeat_cpu_p50_ms": pct(beats, 0.5), "heartbeat_cpu_p99_ms": pct(beats, 0.99)}))


if __name__ == "__main__":
    main()
