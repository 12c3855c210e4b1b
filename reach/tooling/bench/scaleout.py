"""Mode `scaleout`: the router's route role in 1, 2 and 4 processes at one fixed offered rate, and a router added
and one removed under load.

Each step starts, through the `reach` CLI only (`python -m reach router --role route|status`, `reach agent run`),
one status process and N route processes in a namespace of its own, with two instances of the fault suite's ledger
agent behind them (reach.tooling.faults.ledger_agent: every handler run appends `<message_id> <generation>` to a
ledger file, so a repeated side effect is read from the ledger, not guessed from receipts). The bench publishes
open-loop at `rate`/s for `seconds` and reads the status table for each message's terminal row.

Rows:
- `scaleout N route R/s`: CPU ms per request of the route processes summed (`router_cpu_ms_per_request`; each
  request is routed once, so with balanced partitions it is also each router's CPU per request it routed), of
  the busiest and the least busy route process, of the status process and of the agents; lost, a second terminal
  (`duplicated`) and `double_side_effects`.
- `scaleout churn R/s`: two route processes; a third is started a third of the way through the send and one of the
  first two is stopped (SIGTERM, as a scale-down does) at two thirds; lost, duplicated and double side effects
  must all be 0.

The capability topic's partitions (4, topics.yaml's `cap` family) bound the route processes that share its load:
a fifth would own nothing (docs/operations.md, "Deploying on several machines").
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from reach.records import TERMINAL
from reach.settings import KafkaSettings, RedisSettings
from reach.tooling.bench import cpu
from reach.tooling.bench.collector import Collector
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.round_trip import (
    Setup,
    StreamApp,
    _analyse,
    _healthy,
    _wait_terminal,
    decode_receipts,
    send_open_loop,
    stack,
)
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace
from reach.tooling.faults import ledger_agent
from reach.tooling.local.process import free_port

TERMINAL_NAMES = frozenset(s.value for s in TERMINAL)
LEDGER = Setup("ledger x2", ledger_agent.CAPABILITY, ledger_agent.AGENT_ID, "reach.tooling.faults.ledger_agent:agent",
               instances=2)


@dataclass(frozen=True)
class ScaleoutConfig:
    """The fixed offered rate and how long each step sends; `quick()` only checks that the mode runs."""

    rate: float = 150.0
    seconds: float = 20.0
    routers: tuple[int, ...] = (1, 2, 4)
    churn_seconds: float = 30.0  # 2 route processes; +1 at a third, -1 at two thirds
    idle_seconds: float = 10.0  # the route processes' CPU without traffic, before each fixed-rate step
    drain_timeout: float = 90.0

    @classmethod
    def quick(cls) -> ScaleoutConfig:
        return cls(rate=30.0, seconds=3.0, routers=(1, 2), churn_seconds=9.0, idle_seconds=1.0, drain_timeout=60.0)


@dataclass
class Routers:
    """The running `reach router` processes of one step: label -> child; the env they (and the agents) share."""

    env: dict[str, str]
    ledger: Path
    children: dict[str, Child] = field(default_factory=dict)
    last_cpu: cpu.Reading = field(default_factory=dict)  # a stopped process's CPU seconds, read just before SIGTERM
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, label: str, role: str, *, wait: bool = True) -> Child:
        port = free_port()
        child = Child(label, ["reach", "router", "--interval", "5", "--role", role],
                      {**self.env, "REACH_WEB_PORT": str(port)})
        child.port = port  # type: ignore[attr-defined]
        with self._lock:
            self.children[label] = child
        if wait:
            child.wait_until(partial(_healthy, f"http://127.0.0.1:{port}"), 180, f"healthy {label}")
        return child

    def stop(self, label: str) -> None:
        with self._lock:
            child = self.children.pop(label)
            self.last_cpu.update(cpu.read({label: child.pid}))
        child.stop(timeout=60)

    def route_labels(self) -> list[str]:
        with self._lock:
            return [label for label in self.children if label.startswith("router route")]

    def pids(self) -> dict[str, int | None]:
        with self._lock:
            return {label: c.pid for label, c in self.children.items()}

    def app(self) -> StreamApp:
        """The first route process as the StreamApp the agents' stack waits on (its /agents view)."""
        first = self.children["router route 1"]
        port: int = first.port  # type: ignore[attr-defined]
        return StreamApp({k: v for k, v in self.children.items()}, self.env, f"http://127.0.0.1:{port}", {})


@contextmanager
def routers(ws: Workspace, route: int) -> Iterator[Routers]:
    """`route` route processes and one status process in the workspace's namespace, all healthy."""
    with tempfile.TemporaryDirectory(prefix="reach-bench-scaleout-") as tmp:
        ledger = Path(tmp) / "ledger.txt"
        ledger.touch()
        env = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
               "REACH_REDIS_URL": RedisSettings().url(), "REACH_TOPICS_FILE": str(ws.topics_file),
               ledger_agent.LEDGER_ENV: str(ledger), ledger_agent.SICK_ENV: str(Path(tmp) / "never")}
        running = Routers(env, ledger)
        try:
            running.start("router route 1", "route", wait=False)
            running.start("router status", "status", wait=False)
            for n in range(2, route + 1):
                running.start(f"router route {n}", "route", wait=False)
            for label, child in list(running.children.items()):
                child.wait_until(partial(_healthy, f"http://127.0.0.1:{child.port}"), 180,  # type: ignore[attr-defined]
                                 f"healthy {label}")
            yield running
        finally:
            for label in list(running.children):
                running.stop(label)


def double_side_effects(ledger: Path, created: set[str]) -> int:
    """(message, generation) pairs of this step's messages whose handler ran more than once."""
    runs = Counter(tuple(line.split()[:2]) for line in ledger.read_text().splitlines() if line.strip())
    return sum(1 for (mid, _gen), n in runs.items() if n > 1 and mid in created)


def double_terminal(receipts: list[dict[str, Any]], created: set[str]) -> int:
    """Messages of this step with two different terminal statuses for one generation (a repeated identical
    receipt, delivered at least once, is counted in `duplicated` instead)."""
    ends: dict[tuple[str, int], set[str]] = {}
    for r in receipts:
        if r["message_id"] in created and r["status"] in TERMINAL_NAMES:
            ends.setdefault((r["message_id"], int(r.get("generation") or 0)), set()).add(r["status"])
    return sum(1 for statuses in ends.values() if len(statuses) > 1)


def _step(ws: Workspace, config: ScaleoutConfig, route: int, *, churn: bool) -> ModeResult:
    rate, seconds = config.rate, (config.churn_seconds if churn else config.seconds)
    mode = f"scaleout churn {int(rate)}/s" if churn else f"scaleout {route} route {int(rate)}/s"
    with routers(ws, route) as running, stack(ws, running.app(), LEDGER) as agents:
        collector = Collector(ws).start()
        try:
            warm = f"sw{route}{'c' if churn else ''}"
            warm_count = max(int(rate), 10)
            send_open_loop(ws, warm, rate, warm_count, LEDGER.capability)
            _wait_terminal(collector, warm, warm_count, config.drain_timeout)
            collector.take()
            idle_cores = None if churn else _idle_cores(running, config.idle_seconds)
            processes = {**running.pids(), **{f"agent {i + 1}": a.pid for i, a in enumerate(agents.agents)}}
            started, before = time.monotonic(), cpu.read(processes)
            timers = []
            if churn:  # +1 route process at a third of the send, -1 (one of the first two) at two thirds
                timers = [threading.Timer(seconds / 3, lambda: running.start("router route 3", "route", wait=False)),
                          threading.Timer(2 * seconds / 3, lambda: running.stop("router route 2"))]
                for timer in timers:
                    timer.start()
            prefix = f"so{route}{'c' if churn else ''}"
            count = max(int(rate * seconds), 10)
            created = send_open_loop(ws, prefix, rate, count, LEDGER.capability)
            for timer in timers:
                timer.join()
            drained = _drain(collector, set(created), config.drain_timeout)
            after = {**cpu.read({**processes, **running.pids()}), **running.last_cpu}  # a stopped one: its last
            wall = time.monotonic() - started
            per_process = cpu.per_1k(before, after, count)
            workers = set(processes) | set(running.pids())
            seen = collector.take()
            result = _analyse(seen, created, mode=mode, offered=rate, per_process=per_process,
                              workers=workers, drained=drained)
            result.figures["double_terminal"] = double_terminal(decode_receipts(seen.receipts), set(created))
        finally:
            collector.stop()
        result.figures.update(_figures(per_process, route_processes=3 if churn else route))
        result.figures.update(_net_of_idle(result.figures["router_cpu_ms_per_request"], idle_cores, wall, count))
        result.figures["double_side_effects"] = double_side_effects(running.ledger, set(created))
        f = result.figures
        said = [f"route CPU {_ms(f['router_cpu_ms_per_request'])} ms/request "
                f"({_ms(f.get('router_marginal_cpu_ms_per_request'))} net of the idle "
                f"{_ms(f.get('router_idle_cpu_ms_per_s'))} ms/s) over "
                f"{int(f['route_processes'] or 0)} process(es) (each "
                f"{_ms(f['router_cpu_ms_per_request_min'])}-{_ms(f['router_cpu_ms_per_request_max'])}), status "
                f"{_ms(f['status_cpu_ms_per_request'])}, agents {_ms(f['agents_cpu_ms_per_request'])}; "
                f"{int(f['double_side_effects'] or 0)} double side effects, {int(f['double_terminal'] or 0)} double "
                "terminals"]
        if churn:
            said.insert(0, "2 route processes; a 3rd started at 1/3 of the send, the 2nd stopped (SIGTERM) at 2/3")
        result.notes = "; ".join(said + ([result.notes] if result.notes else []))
        return result


def _idle_cores(running: Routers, seconds: float) -> float | None:
    """CPU seconds per second the route processes spend with no traffic (polls, heartbeats, timers), summed."""
    if seconds <= 0:
        return None
    routes = {k: v for k, v in running.pids().items() if k.startswith("router route")}
    t, first = time.monotonic(), cpu.read(routes)
    time.sleep(seconds)
    spent = cpu.spent(first, cpu.read(routes))
    if not spent or any(v is None for v in spent.values()):
        return None
    return sum(v or 0.0 for v in spent.values()) / (time.monotonic() - t)


def _net_of_idle(total_ms: float | None, idle_cores: float | None, wall_s: float,
                 count: int) -> dict[str, float | None]:
    """The route processes' CPU per request without what they spend idle over the step's wall time: what one more
    request costs, as against what one more process costs (its idle ms per second)."""
    if total_ms is None or idle_cores is None or count <= 0:
        return {"router_idle_cpu_ms_per_s": None if idle_cores is None else round(idle_cores * 1000, 2),
                "router_marginal_cpu_ms_per_request": None}
    marginal = (total_ms * count / 1000 - idle_cores * wall_s) / count * 1000
    return {"router_idle_cpu_ms_per_s": round(idle_cores * 1000, 2),
            "router_marginal_cpu_ms_per_request": round(marginal, 4), "step_wall_s": round(wall_s, 1)}


def _drain(collector: Collector, created: set[str], timeout: float) -> bool:
    """Wait for every message's terminal row, up to `timeout` (a rebalance after a router joins or leaves may pause
    progress for longer than the round trip's 20 s no-progress rule allows)."""
    deadline = time.monotonic() + timeout
    while collector.missing(created):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _figures(per_process: dict[str, float | None], *, route_processes: int) -> dict[str, float | None]:
    """CPU ms per request (= CPU s per 1k) by tier: the route processes summed, their busiest and least busy, the
    status process, the agents; None where a process could not be read."""

    def tier(prefix: str) -> list[float | None]:
        return [v for k, v in per_process.items() if k.split("/")[0].startswith(prefix)]

    def total(values: list[float | None]) -> float | None:
        return None if not values or any(v is None for v in values) else round(sum(v or 0.0 for v in values), 4)

    routes = {k.split("/")[0] for k in per_process if k.startswith("router route")}
    each = [total([v for k, v in per_process.items() if k.split("/")[0] == label]) for label in sorted(routes)]
    known = [v for v in each if v is not None]
    return {"route_processes": float(route_processes),
            "router_cpu_ms_per_request": total(tier("router route")),
            "router_cpu_ms_per_request_max": max(known) if known else None,
            "router_cpu_ms_per_request_min": min(known) if known else None,
            "status_cpu_ms_per_request": total(tier("router status")),
            "agents_cpu_ms_per_request": total(tier("agent "))}


def run(config: ScaleoutConfig, *, kafka: KafkaSettings | None = None,
        topics_file: Path = Path("topics.yaml")) -> list[ModeResult]:
    """Every router count at the fixed rate, then the churn run; each step in a namespace of its own."""
    rows: list[ModeResult] = []
    for route, churn in [(n, False) for n in config.routers] + [(2, True)]:
        ws = Workspace(kafka=kafka, topics_file=topics_file)
        try:
            rows.append(_step(ws, config, route, churn=churn))
        finally:
            ws.delete()
    return rows
