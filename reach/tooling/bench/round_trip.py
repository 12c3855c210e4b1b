"""Mode `round trip`: send -> router -> no-op agent (the real SDK) -> COMPLETED in the status table.

The stream app (`reach router`: faust worker + router + status table) and the agent run as child
processes; this process publishes envelopes open-loop at a fixed offered rate (each envelope's
created_at is its scheduled send time, so a late sender counts as latency) and collects receipts
and status rows. Steps, all against created_at on this machine's clock: ROUTED receipt `at`
(router hop), COMPLETED receipt `at`, the status row turning COMPLETED (its changelog record's
timestamp: the round trip).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from reach import redisclient
from reach.errors import InfraUnavailable
from reach.kafka import headers as H
from reach.kafka.codec import decode_dict
from reach.records import Status
from reach.settings import RedisSettings
from reach.tooling.bench import costs, cpu, noop_agent, pacing
from reach.tooling.bench.collector import Collector, Seen
from reach.tooling.bench.results import ModeResult, latency, rate
from reach.tooling.bench.slo import ReceiptBook
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace, message_id
from reach.tooling.local import redisnodes
from reach.tooling.local.process import free_port, stop

_REPO = Path(__file__).resolve().parents[3]


ROLES_ALL = ("all",)
ROLES_SPLIT = ("route", "status")
"""`reach router --role`: the routing hot path and the status fold in one process, or in two."""


@dataclass(frozen=True)
class Setup:
    """Who serves the round trip: `instances` processes of `reach agent run <target>`, behind a stream app that
    runs its roles in one process (ROLES_ALL) or two (ROLES_SPLIT)."""

    name: str
    capability: str
    agent_id: str
    target: str
    instances: int = 1
    path: Path | None = None  # put on PYTHONPATH (examples/ is beside the package, not in it)
    roles: tuple[str, ...] = ROLES_ALL
    redis_masters: int = 0
    """> 0: the stream app and the agents run on a private loopback Redis Cluster of this many masters."""

    def missing(self) -> str | None:
        """Why this set-up cannot run on this installation, or None."""
        if self.redis_masters and shutil.which("redis-server") is None:
            return "redis-server is missing (the Redis Cluster set-up starts its own)"
        if self.roles != ROLES_ALL and not roles_supported():
            return "`reach router --role` is not available on this build"
        if self.path is not None and not (self.path / (self.target.split(":")[0].replace(".", "/") + ".py")).exists():
            return f"{self.target.split(':')[0]} is not beside the installed package (run from a source checkout)"
        return None


NOOP = Setup("noop", noop_agent.CAPABILITY, noop_agent.AGENT_ID, "reach.tooling.bench.noop_agent:agent")
ECHO = Setup("echo x2", "demo.echo", "agent://demo/echo", "examples.echo_agent:agent", instances=2, path=_REPO)
NOOP_X2 = Setup("noop x2", noop_agent.CAPABILITY, noop_agent.AGENT_ID, "reach.tooling.bench.noop_agent:agent",
                instances=2)
NOOP_SPLIT = Setup("noop split", noop_agent.CAPABILITY, noop_agent.AGENT_ID, "reach.tooling.bench.noop_agent:agent",
                   roles=ROLES_SPLIT)
NOOP_REDIS_CLUSTER = Setup("noop redis-cluster", noop_agent.CAPABILITY, noop_agent.AGENT_ID,
                           "reach.tooling.bench.noop_agent:agent", redis_masters=3)
SETUPS = {s.name: s for s in (NOOP, ECHO, NOOP_X2, NOOP_SPLIT, NOOP_REDIS_CLUSTER)}
"""The knee's set-ups: `noop x2` and `noop split` show what a second agent instance, and the router's roles in
two processes, change at the knee; `noop redis-cluster` what a three-master Redis Cluster (decision 0031) costs
against the one Redis."""


def roles_supported() -> bool:
    """Whether this build's stream app runs its roles apart (`reach router --role route|status`)."""
    from reach.streams import app

    role = getattr(app, "Role", None)
    return role is not None and {"route", "status"} <= {r.value for r in role}


@dataclass
class Stack:
    """The running processes of one round trip: the stream app, the agent instances, the broker if local."""

    routers: dict[str, Child]
    agents: list[Child]
    broker: int | None
    meters: costs.Costs | None = None  # broker requests and Redis commands (reach.tooling.bench.costs)

    def read_costs(self, *, opening: bool = True) -> costs.Reading:
        return self.meters.read(opening=opening) if self.meters is not None else costs.Reading()

    def processes(self) -> dict[str, int | None]:
        """Label -> pid of every process whose CPU a step reports (the bench itself: sender and collector)."""
        agents = {("agent" if len(self.agents) == 1 else f"agent {i + 1}"): a.pid for i, a in enumerate(self.agents)}
        routers = {label: c.pid for label, c in self.routers.items()}
        return {**routers, **agents, "broker JVM": self.broker, "bench": os.getpid()}

    def workers(self) -> dict[str, int | None]:
        """The processes doing Reach's work (router and agents), without the broker and the bench."""
        return {k: v for k, v in self.processes().items() if k not in ("broker JVM", "bench")}


@dataclass(frozen=True)
class StreamApp:
    """Running `reach router` children (one per role): the first one's environment and web views' URL."""

    routers: dict[str, Child]
    env: dict[str, str]
    url: str
    ports: dict[str, int]  # label -> the port its counters are served on (reach.tooling.bench.metered)

    @property
    def child(self) -> Child:
        return next(iter(self.routers.values()))


@contextmanager
def redis_cluster(masters: int) -> Iterator[str]:
    """A private loopback Redis Cluster of `masters` for one set-up (reach.tooling.local.redisnodes); its URL."""
    with tempfile.TemporaryDirectory(prefix="reach-bench-redis-") as home:
        nodes = redisnodes.start_cluster([], Path(home), masters)
        try:
            yield redisnodes.cluster_url([n["port"] for n in nodes])
        finally:
            for node in nodes:
                stop(node.get("pid"))


@contextmanager
def stream_app(ws: Workspace, roles: tuple[str, ...] = ROLES_ALL, redis_url: str | None = None) -> Iterator[StreamApp]:
    """`reach router` (faust worker: router, status table, timekeeper) in the workspace's namespace, healthy;
    with ROLES_SPLIT one process routes and another folds the status table. `redis_url`: another Redis than
    REACH_REDIS_URL's (a set-up's cluster); the agents of its stacks inherit it."""
    base = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
            "REACH_REDIS_URL": redis_url or RedisSettings().url(), "REACH_TOPICS_FILE": str(ws.topics_file)}
    routers: dict[str, Child] = {}
    urls: dict[str, str] = {}
    envs: dict[str, dict[str, str]] = {}
    ports: dict[str, int] = {}
    try:
        for role in roles:
            port = free_port()
            label = "router" if role == "all" else f"router {role}"
            envs[label] = {**base, "REACH_WEB_PORT": str(port)}
            urls[label] = f"http://127.0.0.1:{port}"
            routers[label] = metered_child(label, ["router", "--interval", "5",
                                                   *([] if role == "all" else ["--role", role])], envs[label], ports)
        for label, child in routers.items():
            child.wait_until(partial(_healthy, urls[label]), 120, f"healthy {label}")
        first = next(iter(routers))
        yield StreamApp(routers, envs[first], urls[first], ports)
    finally:
        for child in routers.values():
            child.stop()


@contextmanager
def stack(ws: Workspace, app: StreamApp, setup: Setup = NOOP) -> Iterator[Stack]:
    """The set-up's agent instances beside a running stream app, all READY as the router sees them."""
    ws.ensure(ws.names.capability(setup.capability))
    ws.ensure(ws.names.inbox(setup.agent_id), "agent")
    env = dict(app.env)
    if setup.path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(setup.path), os.environ.get("PYTHONPATH")) if p)
    agents: list[Child] = []
    broker = cpu.broker_pid(ws.kafka.servers())
    ports = dict(app.ports)
    redis_url = app.env.get("REACH_REDIS_URL") or _redis_url()
    readers = costs.Costs(broker, redis_url, topics=costs.Topics(ws.admin, ws.namespace),
                          ports=None if redisclient.is_cluster(redis_url or "") else ports)
    try:
        for i in range(setup.instances):
            label = "agent" if setup.instances == 1 else f"agent {i + 1}"
            agents.append(metered_child(f"agent{i + 1}", ["agent", "run", setup.target, "--log-level", "WARNING"],
                                        env, ports, label=label))
        app.child.wait_until(lambda: _ready(app.url, setup.agent_id) >= setup.instances, 120,
                             f"{setup.instances} READY instance(s) of {setup.agent_id} in the registry")
        yield Stack(app.routers, agents, broker, readers)
    finally:
        for agent in agents:
            agent.stop()
        readers.close()


def metered_child(name: str, args: list[str], env: dict[str, str], ports: dict[str, int], *,
                  label: str | None = None) -> Child:
    """`reach <args>` with its process counters served on a free loopback port, recorded in `ports[label]`."""
    port = free_port()
    ports[label or name] = port
    return Child(name, ["reach.tooling.bench.metered", str(port), *args], env)


def _redis_url() -> str | None:
    try:
        return RedisSettings().url()
    except InfraUnavailable:
        return None


def _healthy(url: str) -> bool:
    return bool((_get(f"{url}/healthz") or {}).get("ok"))


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - the child's loopback URL
            return json.loads(resp.read())
    except (OSError, ValueError):  # not listening yet, 503 while starting
        return None


def _ready(url: str, agent_id: str) -> int:
    rows = _get(f"{url}/agents")
    return sum(1 for r in (rows if isinstance(rows, list) else [])
               if r.get("agent_id") == agent_id and r.get("state") == "READY")


def send_open_loop(ws: Workspace, prefix: str, offered: float, count: int,
                   capability: str = noop_agent.CAPABILITY) -> dict[str, int]:
    """Publish `count` envelopes at `offered`/s on schedule, never waiting for acks; returns created_at per id."""
    producer = ws.sender()
    topic = ws.names.capability(capability)
    created: dict[str, int] = {}
    for seq, at in pacing.schedule(offered, count):
        mid = message_id(prefix, seq)
        created[mid] = at
        value = ws.envelope(mid, capability, at)
        pacing.produce(producer, partial(producer.produce, topic, key=mid.encode(), value=value,
                                         headers=[(H.MESSAGE_ID, mid.encode())]))
    if producer.flush(60):
        raise RuntimeError("the open-loop sender's envelopes were not acknowledged within 60 s")
    return created


def run_rate(ws: Workspace, collector: Collector, running: Stack, *, offered: float, seconds: float,
             drain_timeout: float, unfinished: dict[str, set[str]], setup: Setup = NOOP,
             roles: tuple[str, ...] = ROLES_ALL) -> ModeResult:
    """One offered rate: warm-up (half a second's worth), then `seconds` of measured sends, then drain."""
    warm_prefix, prefix = f"warm{int(offered)}", f"rt{int(offered)}"
    send_open_loop(ws, warm_prefix, offered, max(int(offered / 2), 10), setup.capability)
    _wait_terminal(collector, warm_prefix, max(int(offered / 2), 10), drain_timeout)
    collector.take()
    spent_before, before = running.read_costs(), cpu.read(running.processes())
    count = max(int(offered * seconds), 10)
    created = send_open_loop(ws, prefix, offered, count, setup.capability)
    drained = _wait_terminal(collector, prefix, count, drain_timeout)
    per_process = cpu.per_1k(before, cpu.read(running.processes()), count)
    spent = costs.per_request(spent_before, running.read_costs(opening=False), count, ws.namespace)
    result = _analyse(collector.take(), created, mode=mode_name(setup, offered, roles), offered=offered,
                      per_process=per_process, workers=set(running.workers()), drained=drained)
    result.figures.update(spent)
    unfinished[result.mode] = collector.missing(set(created))
    return result


def _wait_terminal(collector: Collector, prefix: str, count: int, timeout: float) -> bool:
    deadline, last, last_change = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        done = collector.terminal(prefix)
        if done >= count:
            return True
        if done != last:
            last, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > 20:
            return False  # no progress for 20 s: report what is missing instead of waiting out the timeout
        time.sleep(0.05)
    return False


def decode_receipts(values: list[bytes]) -> list[dict[str, Any]]:
    return [decode_dict("Receipt", v) for v in values]


def workers_cpu(per_process: dict[str, float | None], workers: set[str]) -> float | None:
    """CPU s / 1k of Reach's own processes (router and agents, with what they spawned); None if any is n/a."""
    mine = [v for k, v in per_process.items() if k.split("/")[0] in workers]
    return None if not mine or any(v is None for v in mine) else round(sum(v for v in mine if v is not None), 4)


def mode_name(setup: Setup, offered: float, roles: tuple[str, ...] = ROLES_ALL) -> str:
    """`round trip 200/s`; `round trip echo x2 100/s`; `round trip split 200/s` (route and status apart)."""
    words = ["round trip", *([] if setup is NOOP else [setup.name]), *([] if roles == ROLES_ALL else ["split"])]
    return f"{' '.join(words)} {int(offered)}/s"


def _analyse(seen: Seen, created: dict[str, int], *, mode: str, offered: float,
             per_process: dict[str, float | None], workers: set[str], drained: bool) -> ModeResult:
    book = ReceiptBook()
    book.add(r for r in decode_receipts(seen.receipts) if r["message_id"] in created)
    table: dict[str, int] = {}
    outcomes: Counter[str] = Counter()
    for mid, (ts, value) in seen.terminal_rows.items():
        if mid in created:
            status = json.loads(value)["status"]
            outcomes[status] += 1
            if status == Status.COMPLETED.value:
                table[mid] = ts
    lost = len(created) - sum(outcomes.values())  # for now: run() checks again after every rate
    spans = list(table.values())
    throughput = rate(len(table), min(created.values()), max(spans)) if spans else 0.0
    other = ", ".join(f"{s}={n}" for s, n in sorted(outcomes.items()) if s != Status.COMPLETED.value)
    notes = f"not COMPLETED: {other}" if other else ""
    if not drained:
        notes += ("; " if notes else "") + "drain timed out"
    out = ModeResult(
        mode=mode, messages=len(created), throughput=throughput,
        latency=latency((ts - created[m] for m, ts in table.items()), "created_at -> status row COMPLETED"),
        cpu_per_1k=workers_cpu(per_process, workers), lost=lost, duplicated=book.duplicated, offered_rate=offered,
        cpu_by_process=per_process, notes=notes,
        figures={"completed_fraction": round(outcomes[Status.COMPLETED.value] / len(created), 5),
                 "overload": len(book.overload & created.keys())},
    )
    for step, stamps, basis in (("router hop", book.routed, "created_at -> ROUTED receipt at"),
                                ("completed receipt", book.completed, "created_at -> COMPLETED receipt at")):
        lat = latency((at - created[m] for m, at in stamps.items()), basis)
        if lat is not None:
            out.steps[step] = lat
    after = latency((ts - book.completed[m] for m, ts in table.items() if m in book.completed),
                    "COMPLETED receipt at -> status row COMPLETED")
    if after is not None:
        out.steps["status row after receipt"] = after
    return out


def run(ws: Workspace, *, rates: list[float], seconds: float, drain_timeout: float = 60.0,
        setup: Setup = NOOP, roles: tuple[str, ...] = ROLES_ALL) -> list[ModeResult]:
    """Every offered rate against one stream app and the set-up's agent instances."""
    with stream_app(ws, roles) as app, stack(ws, app, setup) as running:
        collector = Collector(ws).start()
        unfinished: dict[str, set[str]] = {}
        try:
            results = [run_rate(ws, collector, running, offered=r, seconds=seconds, drain_timeout=drain_timeout,
                                unfinished=unfinished, setup=setup, roles=roles) for r in rates]
            _final_sweep(collector, results, unfinished, timeout=drain_timeout)
            return results
        finally:
            collector.stop()


def _final_sweep(collector: Collector, results: list[ModeResult], unfinished: dict[str, set[str]], *,
                 timeout: float) -> None:
    """Messages unfinished when their rate's drain window closed: lost only if still without a terminal status."""
    waiting = set().union(*unfinished.values()) if unfinished else set()
    deadline, last, last_change = time.monotonic() + timeout, len(waiting), time.monotonic()
    while waiting and time.monotonic() < deadline and time.monotonic() - last_change < 20:
        time.sleep(0.5)
        waiting = collector.missing(waiting)
        if len(waiting) != last:
            last, last_change = len(waiting), time.monotonic()
    for result in results:
        late = unfinished.get(result.mode, set())
        result.unfinished = len(late)
        result.lost = len(late & waiting)
        if late:
            result.notes += f"; {len(late)} had no terminal status when the drain window closed"
