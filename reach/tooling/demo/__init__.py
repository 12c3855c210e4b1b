"""`reach demo`: the whole system on one machine, with traffic, a live view and a summary.

Order of a run: broker and Redis (local unless REACH_BOOTSTRAP is set) -> topics of a fresh namespace
-> the stream app (`reach router`), four example agents (echo, flaky, and audit and notify, which both subscribe
to demo.order.created: a fan-out) in two regions and one sick instance of demo.echo (examples/sick_agent.py: its
calls fail, so its breaker opens; the live table shows the breaker state of every instance); demo.legacy, which no
agent serves, falls back to demo.echo (its POLICY, published before the router starts) -> traffic for
`duration` seconds (or until Ctrl-C) -> drain what is in flight -> stop everything it started -> summary.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from reach.client import Client
from reach.envelopes import now_ms
from reach.kafka import topics
from reach.names import Names
from reach.ops import policy as ops_policy
from reach.settings import ReachSettings
from reach.tooling.demo.dashboard import Dashboard, Frame
from reach.tooling.demo.follower import ReceiptFollower
from reach.tooling.demo.infra import Infra
from reach.tooling.demo.processes import Children, environment, get_json, wait_until
from reach.tooling.demo.signals import StopRequests
from reach.tooling.demo.tally import Rate, Snapshot, Tally
from reach.tooling.demo.traffic import FALLBACKS, REGIONS, Answerer, Traffic
from reach.tooling.local.process import free_port

AGENTS = (("echo", "examples.echo_agent:agent", "agent://demo/echo"),
          ("flaky", "examples.flaky_agent:agent", "agent://demo/flaky"),
          ("audit", "examples.audit_agent:agent", "agent://demo/audit"),  # audit and notify subscribe to
          ("notify", "examples.notify_agent:agent", "agent://demo/notify"))  # demo.order.created: a fan-out
"""(name, module:attr, agent id) of the example agents; one instance of each per region."""
CONVERSING = (("writer", "examples.writer_agent:agent", "agent://demo/writer"),
              ("interview", "examples.interview_agent:agent", "agent://demo/interview"))
"""Agents the demo runs one instance of, in the first region: a streamed answer and a two-turn conversation."""
SICK = ("sick", "examples.sick_agent:agent", "agent://demo/sick")
"""One sick instance of demo.echo in the first region (REACH_SICK_FAIL_RATE, default 1.0): the breaker's subject."""
DEMO_HEALTH = {"REACH_HEALTH_ERROR_RATE": "0.75", "REACH_HEALTH_EJECT_SUCCESS": "0.3"}
"""The flaky agent fails about half its attempts on purpose (its traffic kinds expect retries): with these
thresholds only the sick instance trips its breaker; set the variables to override them."""
DRAIN_S = 20.0
STARTUP_S = 120.0


def run_demo(duration: float | None, *, rate: float = 25.0) -> None:
    """Run the demo for `duration` seconds of traffic (None: until Ctrl-C); everything it starts stops."""
    console = Console() if sys.stdout.isatty() else Console(width=140, soft_wrap=True)  # a log: no wrapping
    say = console.print
    infra = Infra.prepare()
    log_dir = infra.home / "demo" / infra.namespace
    children = Children(cwd=infra.root, log_dir=log_dir, env={})
    run = _Run(console, infra, children, rate)
    with StopRequests(on_first=lambda name: say(f"\n{name}: stopping (again to skip the wait) ...")) as stop:
        try:
            infra.up(say)
            children.env = environment(infra.env())
            if not stop.requested.is_set():
                run.start(stop)
            if not stop.requested.is_set():
                run.watch(stop, duration)
        finally:
            run.stop_threads()
            if children.started:
                say(f"stopping {len(children.started) - 1} agents, then the router ...")
                children.stop_all(hurry=stop.hurry.is_set())
            if infra.started_local:
                say("stopping the local broker and Redis ...")
                infra.down()
    if run.traffic_s is not None:
        run.summarize()


class _Run:
    """The parts of one run that live between start and stop."""

    def __init__(self, console: Console, infra: Infra, children: Children, rate: float) -> None:
        self.console = console
        self.infra = infra
        self.children = children
        self.rate = rate
        self.names = Names(infra.namespace)
        self.tally = Tally()
        self.dashboard = Dashboard(console)
        self.port = free_port()
        self.stop_traffic = threading.Event()
        self.stop_follower = threading.Event()
        self.threads: dict[str, threading.Thread] = {}
        self.traffic_s: float | None = None
        self._client: Client | None = None

    # -- start ---------------------------------------------------------------------------------------
    def start(self, stop: StopRequests) -> None:
        say = self.console.print
        self.set_fallbacks()
        router = self.children.spawn("router", ["router", "--interval", "10"], REACH_WEB_PORT=str(self.port),
                                     **{k: os.environ.get(k, v) for k, v in DEMO_HEALTH.items()})
        for name, target, _ in AGENTS:
            for region in REGIONS:
                self.children.spawn(f"{name}-{region}", ["agent", "run", target], REACH_AGENT_REGION=region)
        for name, target, _ in CONVERSING:
            self.children.spawn(name, ["agent", "run", target], REACH_AGENT_REGION=REGIONS[0])
        self.children.spawn(SICK[0], ["agent", "run", SICK[1]], REACH_AGENT_REGION=REGIONS[0],
                            REACH_SICK_FAIL_RATE=os.environ.get("REACH_SICK_FAIL_RATE", "1.0"))
        say(f"started the router (pid {router.pid}, http://127.0.0.1:{self.port}) and "
            f"{len(self._expected())} agents: " + ", ".join(
                f"{c.name} (pid {c.pid})" for c in self.children.started if c is not router))
        stopping = stop.requested.is_set
        if wait_until(lambda: (get_json(self.url("/healthz")) or {}).get("ok"), timeout=STARTUP_S,
                      what="the router's /healthz", children=self.children, stopping=stopping) is None:
            return
        say("router healthy; waiting for every agent instance to be READY with inbox partitions ...")
        if wait_until(self._agents_ready, timeout=STARTUP_S, what=f"{len(self._expected())} READY agent instances",
                      children=self.children, stopping=stopping) is None:
            return
        self.dashboard.seen_agents(get_json(self.url("/agents")))
        answerer = Answerer(self._answer)
        follower = ReceiptFollower(names=self.names, tally=self.tally, since_ms=now_ms() - 1000,
                                   kafka=self.infra.kafka(), heard=answerer.heard)
        traffic = Traffic(names=self.names, tally=self.tally, rate=self.rate, kafka=self.infra.kafka())
        self.threads["follower"] = threading.Thread(target=follower.run, args=(self.stop_follower,),
                                                    name="demo-receipts", daemon=True)
        self.threads["traffic"] = threading.Thread(target=traffic.run, args=(self.stop_traffic,),
                                                   name="demo-traffic", daemon=True)
        self.threads["answerer"] = threading.Thread(target=answerer.run, args=(self.stop_follower,),
                                                    name="demo-answerer", daemon=True)
        for thread in self.threads.values():
            thread.start()
        say(f"all agents READY; sending {self.rate:g} requests/s "
            "(echo, flaky with retries and business errors, sessions, two regions, a few bad inputs, order events "
            "fanned out to audit and notify, demo.legacy served by its fallback demo.echo, a streamed answer and a "
            "two-turn conversation every 3 s); "
            "the sick echo instance fails its calls until its breaker opens")

    def set_fallbacks(self) -> None:
        """Publish each FALLBACKS policy as `reach policy set --capability C --fallback F` does (the router reads
        the control topic when it starts, so no request of C goes out before its fallback is in effect)."""
        tiers = topics.load(self.infra.topics_file).retry_tiers()
        for capability, to in FALLBACKS.items():
            ops_policy.publish(capability, {"fallback": to}, by="reach-demo", names=self.names, tiers=tiers,
                               kafka=self.infra.kafka())
        self.console.print("POLICY fallback: " + ", ".join(f"{c} -> {to}" for c, to in FALLBACKS.items()))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _answer(self, message_id: str, answer: dict[str, Any]) -> object:
        """Answer a question as `reach answer` does (the status table of this run's router, its Redis)."""
        if self._client is None:
            self._client = Client(kafka=self.infra.kafka(), settings=ReachSettings(namespace=self.infra.namespace),
                                  follow_control=False)
        return self._client.answer(message_id, answer, status_url=self.url(""), redis_url=self.infra.redis_url)

    def _agents_ready(self) -> bool:
        rows = get_json(self.url("/agents")) or []
        ready = {(r["agent_id"], r["region"]) for r in rows if r["state"] == "READY" and r["assigned_partitions"]}
        return ready >= self._expected()

    @staticmethod
    def _expected() -> set[tuple[str, str]]:
        """(agent id, region) of every instance the demo starts."""
        return ({(agent_id, region) for _, _, agent_id in AGENTS for region in REGIONS} | {(SICK[2], REGIONS[0])}
                | {(agent_id, REGIONS[0]) for _, _, agent_id in CONVERSING})

    # -- watch ---------------------------------------------------------------------------------------
    def watch(self, stop: StopRequests, duration: float | None) -> None:
        """Refresh the view ~1/s while traffic runs, then while the in-flight requests finish."""
        tty = self.console.is_terminal
        started = time.monotonic()
        routed = Rate()
        phase, drain_until, interrupted_before_drain = "traffic", 0.0, False
        last_line, last_agents = 0.0, 0.0
        live: Any = Live(console=self.console, refresh_per_second=2, auto_refresh=False) if tty else nullcontext()
        with live:
            while True:
                now = time.monotonic()
                if phase == "traffic" and (stop.requested.is_set() or (duration and now - started >= duration)):
                    self.stop_traffic.set()
                    self.threads["traffic"].join(30)
                    self.traffic_s = time.monotonic() - started
                    phase, drain_until = "finishing in-flight requests", time.monotonic() + DRAIN_S
                    interrupted_before_drain = stop.requested.is_set()
                if phase != "traffic" and (self.tally.pending() == 0 or now > drain_until or stop.hurry.is_set()
                                           or (stop.requested.is_set() and not interrupted_before_drain)):
                    break
                self.children.check()
                if now - last_agents >= 2.0:
                    self.dashboard.seen_agents(get_json(self.url("/agents"), timeout=1.0))
                    last_agents = now
                snap = self.tally.snapshot()
                frame = Frame(namespace=self.infra.namespace, elapsed=now - started, duration=duration,
                              rate=self.rate, routed_per_s=routed.update(snap.totals["routed"], now), phase=phase)
                if tty:
                    live.update(self.dashboard.live(snap, frame), refresh=True)
                elif now - last_line >= 5.0:
                    self.console.print(self.dashboard.compact(snap, frame), highlight=False)
                    last_line = now
                stop.hurry.wait(max(0.05, 1.0 - (time.monotonic() - now)))
        if not tty:
            self.console.print(self.dashboard.compact(self.tally.snapshot(), Frame(
                namespace=self.infra.namespace, elapsed=time.monotonic() - started, duration=duration,
                rate=self.rate, routed_per_s=0.0, phase="done")), highlight=False)

    def stop_threads(self) -> None:
        self.stop_traffic.set()
        if "traffic" in self.threads:
            self.threads["traffic"].join(30)
        if self.traffic_s is None and self.threads:
            self.traffic_s = 0.0
        time.sleep(0.5 if self.threads else 0)  # receipts produced just before the stop still arrive
        self.stop_follower.set()
        for name in ("follower", "answerer"):
            if name in self.threads:
                self.threads[name].join(10)
        if self._client is not None:
            self._client.close()

    # -- summary -------------------------------------------------------------------------------------
    def summarize(self) -> None:
        snap = self.tally.snapshot()
        self.dashboard.summary(snap, namespace=self.infra.namespace, traffic_s=self.traffic_s or 0.0,
                               rate=self.rate, commands=self.commands(snap), log_dir=str(self.children.log_dir))

    def commands(self, snap: Snapshot) -> list[str]:
        """Shell lines to inspect this run afterwards with the same broker and namespace."""
        infra, lines = self.infra, []
        if "REACH_HOME" in os.environ:
            lines.append(f"export REACH_HOME={infra.home}")
        if infra.started_local:
            lines.append("eval $(reach local up)        # start the local broker again; it kept the records")
        elif infra.local is not None:
            lines.append("eval $(reach local status)    # the local broker is still running")
        else:
            lines.append(f"export REACH_BOOTSTRAP={infra.bootstrap} REACH_REDIS_URL={infra.redis_url}")
        lines.append(f"export REACH_NAMESPACE={infra.namespace}")
        lines.append("reach dlq ls                  # dead letters: bad inputs, NO_ROUTE, retries exhausted")
        queries = infra.root / "docs" / "queries" / "success_rate.sql"
        shown = queries.relative_to(Path.cwd()) if queries.is_relative_to(Path.cwd()) else queries
        lines.append(f"reach receipts sql -f {shown}")
        lines.append("reach router &                # `reach status` asks the stream app for the status table")
        for outcome, note in (("completed_after_retry", "a flaky request that succeeded after retries"),
                              ("dead_lettered", "a dead-lettered request"), ("rejected", "a rejected bad input"),
                              ("fanned_out", "an order event and its deliveries to audit and notify"),
                              ("fallback", "a demo.legacy request and the fallback's child that served it"),
                              ("unplanned", "a request that did not end as its kind expects")):
            if outcome in snap.examples:
                lines.append(f"reach status {snap.examples[outcome]}    # {note}")
        return lines
