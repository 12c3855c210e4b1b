"""Mode `swarm`: N agents x K instances through the real SDK in a few processes, beside one stream app.

`reach bench --modes swarm --agents N --instances-per-agent K`. Agent i (`agent://swarm/a<i>`) serves capability
`swarm.c<i mod C>`, C = N / agents-per-capability, so a routing decision has agents-per-capability x K candidates
out of N x K registered. The instances run in `--swarm-processes` children (reach.tooling.bench.swarm_worker), each
a real `Agent.run()`: registration, heartbeats every ttl/3, load reports, inbox consumer, leases in Redis, receipts.

Phases, in one namespace:
1. start: from spawning the children until the registry shows every instance READY with inbox partitions;
2. idle: heartbeat and load-report records per second and the router's CPU per 1,000 of them, RSS of the router,
   the workers and the (local) broker, partitions and replicas per broker of the namespace's topics;
3. traffic with unique business keys, then traffic where `repeat_share` of the envelopes reuse an earlier key of
   their capability: the idempotency hit rate (COMPLETED receipts marked `idempotency_hit`) and the Redis round
   trips per hit, derived from the two phases' round trips per request;
4. departure, during the repeated-key traffic: `leave` instances drain and leave at once; registry convergence is
   the time until none of them is READY in the registry, rejoin the time until they are all READY again;
5. every envelope sent must reach a terminal status row (lost must be 0);
6. the routing decision in this process, over the run's own registrations: the router's per-batch work (route
   table, loads of the live instances, decide) with a heartbeat applied before each decision, as thousands of
   heartbeats a second move the registry between batches. The hop is created_at -> ROUTED receipt.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import yaml
from confluent_kafka import TopicPartition

from reach.core import routing
from reach.core.candidates import RouteRequest
from reach.core.views.registryview import RegistryView
from reach.envelopes import now_ms
from reach.kafka import clients
from reach.records import AgentRegistration, AgentState, Status
from reach.registry import apply_record
from reach.streams.router.routetable import RouteTables
from reach.streams.router.state import RouterState
from reach.tooling.bench import cpu, metered, pacing, swarm_worker
from reach.tooling.bench.collector import Collector
from reach.tooling.bench.results import Latency, ModeResult, latency
from reach.tooling.bench.round_trip import decode_receipts, stream_app
from reach.tooling.bench.slo import ReceiptBook
from reach.tooling.bench.subprocesses import Commanded
from reach.tooling.bench.workspace import Workspace, message_id
from reach.tooling.local.process import free_port

INBOX_PARTITIONS = 2
"""The swarm's inboxes: one partition per instance of an agent run at once (decision 0068)."""


def sized_topics(topics_file: Path, into: Path) -> Path:
    """A copy of `topics_file` whose agent family sizes the swarm's inboxes at INBOX_PARTITIONS (`sizes`)."""
    data = yaml.safe_load(topics_file.read_text())
    agent = data["families"]["agent"]
    agent["sizes"] = {f"{swarm_worker.AGENT_PREFIX}*": INBOX_PARTITIONS, **(agent.get("sizes") or {})}
    path = into / "topics.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass(frozen=True)
class SwarmConfig:
    """The fleet's shape and the phases' lengths; `quick()` is the smoke test's."""

    agents: int = 50
    instances_per_agent: int = 1
    processes: int = 2
    agents_per_capability: int = 10
    rate: float = 50.0  # envelopes/s over all capabilities, each traffic phase
    seconds: float = 20.0  # each traffic phase
    repeat_share: float = 0.2  # of the second phase's envelopes reuse an earlier business key of their capability
    leave: int = 100  # instances leaving at once (at most half the fleet)
    idle_seconds: float = 10.0
    decisions: int = 2_000
    start_timeout: float = 600.0
    drain_timeout: float = 180.0

    @classmethod
    def quick(cls, **changes: Any) -> SwarmConfig:
        base: dict[str, Any] = {"agents": 6, "processes": 1, "agents_per_capability": 3, "rate": 10.0,
                                "seconds": 2.0, "leave": 2, "idle_seconds": 2.0, "decisions": 100}
        return cls(**{**base, **changes})

    @property
    def instances(self) -> int:
        return self.agents * self.instances_per_agent

    @property
    def capabilities(self) -> int:
        return max(1, math.ceil(self.agents / self.agents_per_capability))

    @property
    def leaving(self) -> int:
        return max(1, min(self.leave, self.instances // 2))

    @property
    def name(self) -> str:
        return f"swarm {self.agents}x{self.instances_per_agent}"


class RegistryTail:
    """A thread folding `<ns>.registry` (from the beginning) into a RegistryView, counting what it applied."""

    def __init__(self, ws: Workspace) -> None:
        self.view = RegistryView()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = ws.consumer(profile="feed")
        self._consumer.assign([TopicPartition(ws.names.registry, p, 0)
                               for p in range(ws.spec.topics["registry"].partitions)])
        self._thread = threading.Thread(target=self._run, name="swarm-registry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = clients.take(self._consumer, 2_000, 0.1)
            with self.lock:
                for msg in batch:
                    if msg.error() is None:
                        apply_record(self.view, msg.key(), msg.value())

    def ready(self, ids: set[str] | None = None) -> set[str]:
        """Instances READY with inbox partitions (among `ids`, when given)."""
        with self.lock:
            live = self.view.live(now_ms())
        return {r.instance_id for r in live if r.assigned_partitions and (ids is None or r.instance_id in ids)}

    def registrations(self) -> list[AgentRegistration]:
        with self.lock:
            return [i.registration for i in self.view.instances(now_ms())]

    def wait(self, condition: Any, timeout: float, what: str, workers: list[Worker]) -> float:
        """Seconds until `condition()`; a worker exiting or the timeout raises."""
        started = time.monotonic()
        while not condition():
            dead = [w for w in workers if w.proc.poll() is not None]
            if dead:
                raise RuntimeError(f"a swarm worker exited before {what}:\n{dead[0].tail()}")
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"no {what} within {timeout:.0f} s:\n{workers[0].tail()}")
            time.sleep(0.1)
        return time.monotonic() - started

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


class Worker(Commanded):
    """One swarm_worker child: its instances and its counters' port."""

    def __init__(self, specs: list[tuple[int, int]], capabilities: int, env: dict[str, str]) -> None:
        self.port = free_port()
        super().__init__("swarm worker", ["reach.tooling.bench.swarm_worker", str(self.port), str(capabilities),
                                          *(f"{a}:{n}" for a, n in specs)], env)
        self.instances = {swarm_worker.instance_id(a, k) for a, n in specs for k in range(n)}


@dataclass
class Traffic:
    """What one traffic phase sent: created_at and capability per message id, and how many reused a key."""

    created: dict[str, int] = field(default_factory=dict)
    repeated: int = 0


def split(config: SwarmConfig) -> list[list[tuple[int, int]]]:
    """Agents dealt round-robin over the processes: (agent index, instances) per process."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(max(1, min(config.processes, config.agents)))]
    for i in range(config.agents):
        out[i % len(out)].append((i, config.instances_per_agent))
    return out


def send(ws: Workspace, prefix: str, config: SwarmConfig, *, repeat_share: float, rng: random.Random) -> Traffic:
    """Open loop at config.rate for config.seconds, round-robin over the capabilities; a `repeat_share` of the
    envelopes carry a business key sent before in this phase for the same capability."""
    producer, traffic = ws.sender(), Traffic()
    keys: dict[str, list[str]] = {}
    count = max(int(config.rate * config.seconds), config.capabilities)
    for seq, at in pacing.schedule(config.rate, count):
        mid = message_id(prefix, seq)
        cap = swarm_worker.capability(seq, config.capabilities)
        earlier = keys.setdefault(cap, [])
        if earlier and rng.random() < repeat_share:
            key = rng.choice(earlier)
            traffic.repeated += 1
        else:  # a business key of its own, never a message id (a key equal to its message id is no business key)
            key = f"key-{mid}"
            earlier.append(key)
        traffic.created[mid] = at
        value = ws.envelope(mid, cap, at, idempotency_key=key)
        pacing.produce(producer, partial(producer.produce, ws.names.capability(cap), key=mid.encode(), value=value))
    if producer.flush(60):
        raise RuntimeError("the swarm's envelopes were not acknowledged within 60 s")
    return traffic


def placement(ws: Workspace) -> dict[str, float]:
    """Partitions and replicas per broker of the namespace's topics (leaders and all replicas)."""
    meta = ws.admin.list_topics(timeout=30)
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    partitions = 0
    for name, topic in meta.topics.items():
        if not name.startswith(ws.namespace + "."):
            continue
        for part in topic.partitions.values():
            partitions += 1
            leaders[part.leader] += 1
            replicas.update(part.replicas)
    brokers = max(len(meta.brokers), 1)
    return {"brokers": brokers, "partitions": partitions, "replicas": sum(replicas.values()),
            "max_partition_leaders_per_broker": max(leaders.values(), default=0),
            "max_replicas_per_broker": max(replicas.values(), default=0),
            "cluster_partitions_all_namespaces": sum(len(t.partitions) for t in meta.topics.values())}


def rss_mib(pids: list[int | None]) -> float | None:
    total = 0.0
    for pid in pids:
        if pid is None:
            return None
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            return None
    return round(total / 2**20, 1)


def decision_cost(regs: list[AgentRegistration], capabilities: int, calls: int, *,
                  heartbeats: bool) -> tuple[Latency, Latency] | None:
    """The router's per-batch work for one request, over these registrations: the route table at now, the loads
    of its live instances, one decide(); with `heartbeats`, one registration is re-applied (a heartbeat) before
    each call, so the table is derived again as it is when heartbeats arrive between batches."""
    live = [r for r in regs if r.state is AgentState.READY]
    if not live:
        return None
    state = RouterState()
    for reg in live:
        state.apply_registration(reg.instance_id, reg)
    tables, rng = RouteTables(state), random.Random(7)
    samples: list[float] = []
    spent: list[float] = []  # the thread's CPU time: on a shared machine, wall time also counts waits for a core
    for i in range(calls + calls // 10):
        now = now_ms()
        if heartbeats:
            beat = live[i % len(live)]
            state.apply_registration(beat.instance_id, beat.model_copy(update={"heartbeat_at": now}))
        cap = swarm_worker.capability(i, capabilities)
        t, c = time.perf_counter_ns(), time.thread_time_ns()
        table = tables.at(now)
        routing.decide(RouteRequest(message_id=str(i), capability=cap), table.by_capability.get(cap, ()),
                       weights=table.settings_of(state, cap)[0], now_ms=now,
                       loads=state.loads.on_demand(table.live_by_id, now_ms=now), disabled=table.disabled,
                       health=state.health, rng=rng)
        if i >= calls // 10:  # the first tenth warms caches
            samples.append((time.perf_counter_ns() - t) / 1e6)
            spent.append((time.thread_time_ns() - c) / 1e6)
    what = "route table + its candidates' loads + decide, " + ("a heartbeat before each" if heartbeats
                                                               else "no heartbeat")
    wall, cpu_time = latency(samples, what), latency(spent, what + ", CPU time")
    return (wall, cpu_time) if wall is not None and cpu_time is not None else None


def _redis_trips(workers: list[Worker]) -> float | None:
    readings = metered.read_all({str(i): w.port for i, w in enumerate(workers)})
    if any(r is None for r in readings.values()):
        return None
    return sum((r or {}).get("reach_redis_round_trips_total", 0.0) for r in readings.values())


def _records(ws: Workspace, consumer: Any) -> int:
    ends = ws.end_offsets([ws.names.registry, ws.names.loads], consumer)
    return sum(ends.values())


def _wait_terminal(collector: Collector, ids: set[str], timeout: float) -> set[str]:
    deadline = time.monotonic() + timeout
    missing = collector.missing(ids)
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = collector.missing(ids)
    return missing


def run(ws: Workspace, config: SwarmConfig, progress: Any = lambda _m: None) -> list[ModeResult]:
    """The whole swarm run; one row with every figure."""
    for c in range(config.capabilities):
        ws.ensure(ws.names.capability(swarm_worker.capability(c, config.capabilities)))
    figures: dict[str, float | None] = {"agents": config.agents, "instances": config.instances,
                                        "capabilities": config.capabilities,
                                        "candidates_per_capability": config.agents_per_capability
                                        * config.instances_per_agent}
    steps: dict[str, Latency] = {}
    workers: list[Worker] = []
    with stream_app(ws) as app:
        tail = RegistryTail(ws)
        collector = Collector(ws).start()
        env = app.env
        try:
            began = time.monotonic()
            workers = [Worker(specs, config.capabilities, env) for specs in split(config)]
            everyone = set().union(*(w.instances for w in workers))
            tail.wait(lambda: len(tail.ready(everyone)) == len(everyone), config.start_timeout,
                      f"{len(everyone)} READY instances", workers)
            figures["start_s"] = round(time.monotonic() - began, 1)
            progress(f"swarm: {len(everyone)} instances READY in {figures['start_s']} s")

            counter = ws.consumer(profile="feed")
            router = app.child.pid
            pids = {"router": router, **{f"worker {i}": w.proc.pid for i, w in enumerate(workers)}}
            before, records0, t0 = cpu.read(pids), _records(ws, counter), time.monotonic()
            time.sleep(config.idle_seconds)
            spent, beats = cpu.spent(before, cpu.read(pids)), _records(ws, counter) - records0
            window = time.monotonic() - t0
            counter.close()
            router_cpu = sum(v or 0.0 for k, v in spent.items() if k.startswith("router"))
            worker_cpu = sum(v or 0.0 for k, v in spent.items() if k.startswith("worker"))
            figures.update({
                "heartbeat_and_load_records_per_s": round(beats / window, 1),
                "router_cpu_per_1k_heartbeats_s": round(router_cpu / beats * 1000, 4) if beats else None,
                "router_cores_idle": round(router_cpu / window, 3),
                "worker_cores_idle": round(worker_cpu / window, 3),
                "router_rss_mib": rss_mib([router]),
                "workers_rss_mib": rss_mib([w.proc.pid for w in workers]),
                "broker_rss_mib": rss_mib([cpu.broker_pid(ws.kafka.servers())]),
                **placement(ws),
            })
            progress(f"swarm: idle {figures['heartbeat_and_load_records_per_s']} records/s")

            rng = random.Random(11)
            trips0 = _redis_trips(workers)
            unique = send(ws, "swu", config, repeat_share=0.0, rng=rng)
            lost_unique = _wait_terminal(collector, set(unique.created), config.drain_timeout)
            trips1 = _redis_trips(workers)

            leaving = sorted(tail.ready(everyone))[:config.leaving]
            repeated: list[Traffic] = []

            def second_phase() -> None:
                repeated.append(send(ws, "swr", config, repeat_share=config.repeat_share, rng=rng))

            sender = threading.Thread(target=second_phase, daemon=True)
            sender.start()
            time.sleep(config.seconds / 3)
            by_worker = {id(w): [i for i in leaving if i in w.instances] for w in workers}
            left_at = time.monotonic()
            stoppers = [threading.Thread(target=w.ask, kwargs={"op": "stop", "ids": by_worker[id(w)]})
                        for w in workers if by_worker[id(w)]]
            for s in stoppers:
                s.start()
            gone = set(leaving)
            tail.wait(lambda: not tail.ready(gone), config.drain_timeout, "departure converged", workers)
            figures["departure_converged_s"] = round(time.monotonic() - left_at, 2)
            for s in stoppers:
                s.join(180)
            figures["departure_drained_s"] = round(time.monotonic() - left_at, 2)
            back = time.monotonic()
            for w in workers:
                if by_worker[id(w)]:
                    w.ask(op="start", ids=by_worker[id(w)])
            figures["rejoin_s"] = round(tail.wait(lambda: tail.ready(gone) == gone, config.start_timeout,
                                                  "rejoined instances READY", workers), 2)
            figures["rejoin_after_leave_s"] = round(time.monotonic() - back, 2)
            sender.join(config.seconds * 3 + 60)
            second = repeated[0] if repeated else Traffic()
            lost_repeated = _wait_terminal(collector, set(second.created), config.drain_timeout)
            trips2 = _redis_trips(workers)
            figures["instance_restarts"] = sum(int(w.ask(op="stats")["restarts"]) for w in workers)
            regs = tail.registrations()  # before the workers leave: their tombstones empty the registry
        finally:
            for w in workers:
                w.stop(120)
            collector.stop()
            tail.close()
    seen = collector.take()
    book = ReceiptBook()
    created = {**unique.created, **second.created}
    receipts = [r for r in decode_receipts(seen.receipts) if r["message_id"] in created]
    book.add(receipts)
    hits = sum(1 for r in receipts if r["status"] == Status.COMPLETED.value
               and (r.get("timings") or {}).get("idempotency_hit") and r["message_id"] in second.created)
    completed = {m: ts for m, (ts, value) in seen.terminal_rows.items() if m in created
                 and json.loads(value)["status"] == Status.COMPLETED.value}
    n_unique, n_second = len(unique.created), len(second.created)
    per_request = (trips1 - trips0) / n_unique if None not in (trips0, trips1) and n_unique else None  # type: ignore[operator]
    figures.update({
        "repeat_share": config.repeat_share, "repeated_keys_sent": second.repeated,
        "idempotency_hits": hits, "idempotency_hit_rate": round(hits / n_second, 4) if n_second else None,
        "hits_per_repeated_key": round(hits / second.repeated, 4) if second.repeated else None,
        "redis_round_trips_per_request_unique": round(per_request, 2) if per_request is not None else None,
    })
    if per_request is not None and trips2 is not None and hits:
        second_trips = trips2 - trips1  # type: ignore[operator]
        figures["redis_round_trips_per_request_repeated"] = round(second_trips / n_second, 2)
        figures["redis_round_trips_per_hit"] = round((second_trips - (n_second - hits) * per_request) / hits, 2)
    lost = len(lost_unique) + len(lost_repeated)
    for heartbeats in (False, True):
        found = decision_cost(regs, config.capabilities, config.decisions, heartbeats=heartbeats)
        if found is not None:
            name = "decision" + (" under heartbeats" if heartbeats else "")
            steps[name], steps[name + " (CPU)"] = found
    hop = latency((at - created[m] for m, at in book.routed.items()), "created_at -> ROUTED receipt at")
    if hop is not None:
        steps["router hop"] = hop
    outcomes = Counter(book.terminal.values())
    other = ", ".join(f"{s}={n}" for s, n in sorted(outcomes.items()) if s != Status.COMPLETED.value)
    span = (max(completed.values()) - min(created.values())) / 1000 if completed else 0.0
    return [ModeResult(
        mode=config.name, messages=len(created), throughput=len(completed) / span if span > 0 else 0.0,
        latency=latency((ts - created[m] for m, ts in completed.items()), "created_at -> status row COMPLETED"),
        cpu_per_1k=None, lost=lost, duplicated=book.duplicated, offered_rate=config.rate, steps=steps,
        figures=figures,
        notes=(f"{config.instances} instances in {len(split(config))} processes; start {figures.get('start_s')} s; "
               f"{config.leaving} left at once: registry converged in {figures.get('departure_converged_s')} s, "
               f"rejoined in {figures.get('rejoin_s')} s; idempotency hit rate "
               f"{figures.get('idempotency_hit_rate')} at a repeat share of {config.repeat_share}"
               + (f"; not COMPLETED: {other}" if other else "")),
    )]
