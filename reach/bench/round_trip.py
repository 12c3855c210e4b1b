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
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from reach import headers as H
from reach.bench import noop_agent
from reach.bench.collector import Collector, Seen
from reach.bench.results import ModeResult, latency, rate
from reach.bench.subprocesses import Child
from reach.bench.workspace import Workspace, message_id
from reach.codec import decode_dict
from reach.local.process import free_port
from reach.records import Status
from reach.settings import RedisSettings


@contextmanager
def stack(ws: Workspace) -> Iterator[tuple[Child, Child]]:
    """The stream app and one no-op agent instance, both READY as the router sees them."""
    port = free_port()
    env = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
           "REACH_REDIS_URL": RedisSettings().url(), "REACH_TOPICS_FILE": str(ws.topics_file),
           "REACH_WEB_PORT": str(port)}
    ws.ensure(ws.names.capability(noop_agent.CAPABILITY))
    ws.ensure(ws.names.inbox(noop_agent.AGENT_ID), "agent")
    router = Child("router", ["reach", "router", "--interval", "5"], env)
    agent: Child | None = None
    try:
        url = f"http://127.0.0.1:{port}"
        router.wait_until(lambda: bool((_get(f"{url}/healthz") or {}).get("ok")), 120, "healthy router")
        agent = Child("agent", ["reach", "agent", "run", "reach.bench.noop_agent:agent", "--log-level", "WARNING"],
                      env)
        router.wait_until(lambda: _agent_ready(url), 120, "READY no-op agent in the registry")
        yield router, agent
    finally:
        if agent is not None:
            agent.stop()
        router.stop()


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - the child's loopback URL
            return json.loads(resp.read())
    except (OSError, ValueError):  # not listening yet, 503 while starting
        return None


def _agent_ready(url: str) -> bool:
    rows = _get(f"{url}/agents")
    return any(r.get("agent_id") == noop_agent.AGENT_ID and r.get("state") == "READY"
               for r in (rows if isinstance(rows, list) else []))


def send_open_loop(ws: Workspace, prefix: str, offered: float, count: int) -> dict[str, int]:
    """Publish `count` envelopes at `offered`/s on schedule, never waiting for acks; returns created_at per id."""
    producer = ws.producer()
    topic = ws.names.capability(noop_agent.CAPABILITY)
    created: dict[str, int] = {}
    start = time.time()
    for seq in range(count):
        due = start + seq / offered
        wait = due - time.time()
        if wait > 0.0005:
            time.sleep(wait)
        mid = message_id(prefix, seq)
        at = int(due * 1000)
        created[mid] = at
        while True:
            try:
                producer.produce(topic, key=mid.encode(), value=ws.envelope(mid, noop_agent.CAPABILITY, at),
                                 headers=[(H.MESSAGE_ID, mid.encode())])
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("the open-loop sender's envelopes were not acknowledged within 60 s")
    return created


def run_rate(ws: Workspace, collector: Collector, router: Child, agent: Child, *, offered: float, seconds: float,
             drain_timeout: float, unfinished: dict[str, set[str]]) -> ModeResult:
    """One offered rate: warm-up (half a second's worth), then `seconds` of measured sends, then drain."""
    warm_prefix, prefix = f"warm{int(offered)}", f"rt{int(offered)}"
    send_open_loop(ws, warm_prefix, offered, max(int(offered / 2), 10))
    _wait_terminal(collector, warm_prefix, max(int(offered / 2), 10), drain_timeout)
    collector.take()
    before = (router.cpu(), agent.cpu())
    count = max(int(offered * seconds), 10)
    created = send_open_loop(ws, prefix, offered, count)
    drained = _wait_terminal(collector, prefix, count, drain_timeout)
    cpu = (router.cpu() - before[0], agent.cpu() - before[1])
    result = _analyse(collector.take(), created, offered=offered, cpu=cpu, drained=drained)
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


def _analyse(seen: Seen, created: dict[str, int], *, offered: float, cpu: tuple[float, float],
             drained: bool) -> ModeResult:
    routed: dict[str, int] = {}
    completed: dict[str, int] = {}
    routed_count: Counter[str] = Counter()
    completed_count: Counter[str] = Counter()
    for value in seen.receipts:
        receipt = decode_dict("Receipt", value)
        mid = receipt["message_id"]
        if mid not in created:
            continue
        if receipt["status"] == Status.ROUTED.value:
            routed_count[mid] += 1
            routed.setdefault(mid, receipt["at"])
        elif receipt["status"] == Status.COMPLETED.value:
            completed_count[mid] += 1
            completed.setdefault(mid, receipt["at"])
    table: dict[str, int] = {}
    outcomes: Counter[str] = Counter()
    for mid, (ts, value) in seen.terminal_rows.items():
        if mid in created:
            status = json.loads(value)["status"]
            outcomes[status] += 1
            if status == Status.COMPLETED.value:
                table[mid] = ts
    lost = len(created) - sum(outcomes.values())  # for now: run() checks again after every rate
    dup = sum(n - 1 for n in routed_count.values() if n > 1) + sum(n - 1 for n in completed_count.values() if n > 1)
    spans = list(table.values())
    throughput = rate(len(table), min(created.values()), max(spans)) if spans else 0.0
    other = ", ".join(f"{s}={n}" for s, n in sorted(outcomes.items()) if s != Status.COMPLETED.value)
    n = len(created)
    notes = (f"CPU/1k: stream app {cpu[0] / n * 1000:.2f} s + agent {cpu[1] / n * 1000:.2f} s"
             + (f"; not COMPLETED: {other}" if other else ""))
    if not drained:
        notes += "; drain timed out"
    out = ModeResult(
        mode=f"round trip {int(offered)}/s", messages=len(created), throughput=throughput,
        latency=latency((ts - created[m] for m, ts in table.items()), "created_at -> status row COMPLETED"),
        cpu_per_1k=sum(cpu) / n * 1000, lost=lost, duplicated=dup, offered_rate=offered, notes=notes,
    )
    for step, stamps in (("router hop", routed), ("completed receipt", completed)):
        basis = "created_at -> ROUTED receipt at" if step == "router hop" else "created_at -> COMPLETED receipt at"
        lat = latency((at - created[m] for m, at in stamps.items()), basis)
        if lat is not None:
            out.steps[step] = lat
    return out


def run(ws: Workspace, *, rates: list[float], seconds: float, drain_timeout: float = 60.0) -> list[ModeResult]:
    """Every offered rate against one stream app and one agent instance."""
    with stack(ws) as (router, agent):
        collector = Collector(ws).start()
        unfinished: dict[str, set[str]] = {}
        try:
            results = [run_rate(ws, collector, router, agent, offered=r, seconds=seconds, drain_timeout=drain_timeout,
                                unfinished=unfinished) for r in rates]
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
