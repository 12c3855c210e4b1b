"""Every fault the suite injects, one list: its name, what it does, and the targets it is held to."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec
from reach.tooling.faults import ledger_agent, netsplit
from reach.tooling.faults.checker import Window
from reach.tooling.faults.rig import Rig, wait_until
from reach.tooling.faults.settings import FaultSettings
from reach.tooling.local import process

log = logging.getLogger("reach.tooling.faults")


class Kind(StrEnum):
    """Where the fault is: it sets the recovery target and whether a repeated side effect is allowed."""

    PROCESS = "process"     # router worker: no repeated side effect, recovery <= 30 s
    AGENT = "agent"         # agent instance: repeats at most the handlers in flight, recovery <= 30 s
    BROKER = "broker"       # Kafka node: no repeated side effect, recovery <= 60 s
    REDIS = "redis"         # the agents' Redis: repeats measured, recovery <= 30 s
    DOWNSTREAM = "downstream"  # the handler's own dependency fails: recovery <= 60 s
    INPUT = "input"         # bad records mixed into the traffic


RECOVERY_TARGET_S = {Kind.PROCESS: 30.0, Kind.AGENT: 30.0, Kind.BROKER: 60.0, Kind.REDIS: 30.0,
                     Kind.DOWNSTREAM: 60.0, Kind.INPUT: 30.0}
REPEATS_ALLOWED = frozenset({Kind.AGENT, Kind.REDIS})


@dataclass
class Poison:
    """While `on`, every 10th envelope of the traffic is followed by a poison record (keyed by its own id)."""

    on: threading.Event = field(default_factory=threading.Event)
    control_topic: str = ""
    count: int = 0

    def __call__(self, n: int) -> tuple[str, bytes] | None:
        if not self.on.is_set() or n % 10:
            return None
        self.count += 1
        if self.count % 2:
            return f"poison-junk-{n}", b"\x00\x01 not an envelope"
        # an envelope whose reply_to would make the stream app write into its own control topic
        sneaky = new_envelope(ledger_agent.CAPABILITY, {"n": n}, reply_to=self.control_topic)
        return sneaky.message_id, codec.encode(sneaky)


Inject = Callable[[Rig, FaultSettings, Poison], Window]


@dataclass(frozen=True)
class Scenario:
    """One fault: injected while open-loop traffic runs, then the checker's figures."""

    name: str
    kind: Kind
    summary: str
    inject: Inject
    unavailable: Callable[[], str | None] = lambda: None  # why this machine cannot inject it (None: it can)
    # the shortest traffic after the fault that can show its recovery (REACH_FAULTS_AFTER_S when longer)
    min_after_s: Callable[[], float] = lambda: 0.0

    def after_s(self, settings: FaultSettings) -> float:
        return max(settings.after_s, self.min_after_s())

    @property
    def recovery_target_s(self) -> float:
        return RECOVERY_TARGET_S[self.kind]

    @property
    def repeats_allowed(self) -> bool:
        return self.kind in REPEATS_ALLOWED


def _hold(seconds: float) -> None:
    """The fault's own length (a pause, an outage): the experiment's definition, not a wait for a condition."""
    time.sleep(seconds)


def router_sigkill(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    with rig.paused_supervisor():
        start = now_ms()
        old = rig.routers[0]
        old.kill()
        end = now_ms()  # restarted at once, as a supervisor would; recovery includes the new worker's start
        rig.routers.remove(old)
        rig.start_router(wait=False)
    return Window(start, end)


def agent_sigkill(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    with rig.paused_supervisor():
        start = now_ms()
        rig.agents[0].kill()
        end = now_ms()
        rig.agents.pop(0)
        rig.start_agent()
    return Window(start, end)


def agent_sigstop(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    start = now_ms()
    victim = rig.agents[0]
    victim.signal(signal.SIGSTOP)
    _hold(s.pause_s)
    victim.signal(signal.SIGCONT)
    return Window(start, now_ms())


def worker_rebalance(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    start = now_ms()
    with rig.paused_supervisor():
        joined = rig.start_router(wait=False)
    _hold(s.pause_s)
    with rig.paused_supervisor():
        joined.stop()
        rig.routers.remove(joined)
    return Window(start, now_ms())


def _kill_node(rig: Rig, node_id: int, sig: signal.Signals) -> None:
    pid = rig.node_pid(node_id)
    os.kill(pid, sig)
    wait_until(lambda: not process.alive(pid), 90, f"node {node_id} to exit")


def leader_sigkill(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    node = rig.busiest_leader()
    start = now_ms()
    _kill_node(rig, node, signal.SIGKILL)
    _hold(s.down_s)
    rig.infra.start_node(node)
    return Window(start, now_ms())


def rolling_bounce(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    start = now_ms()
    for node in rig.infra.nodes():
        _kill_node(rig, node.node_id, signal.SIGTERM)  # a clean shutdown: leadership moves first
        rig.infra.start_node(node.node_id)
        wait_until(rig.fully_replicated, 120, f"node {node.node_id} back in every ISR", interval=0.5)
    return Window(start, now_ms())


def broker_pause(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    node = rig.busiest_leader()
    pid = rig.node_pid(node)
    start = now_ms()
    os.kill(pid, signal.SIGSTOP)
    try:
        _hold(s.pause_s)
    finally:
        os.kill(pid, signal.SIGCONT)
    return Window(start, now_ms())


def partition(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    """Cut the busiest leader off from its peers and every client for REACH_FAULTS_PAUSE_S (past the brokers'
    session timeout, 9 s, and replica.lag.time.max.ms, 10 s: the controller fences it, leadership moves), then
    heal; the rules go even when the run fails."""
    node = rig.busiest_leader()
    with netsplit.Partition(rig.node_pid(node), name=f"reach-faults-{rig.namespace}") as cut:
        start = now_ms()
        _hold(s.pause_s)
        try:  # evidence that the cut held, as the rest of the cluster sees it
            in_isr, leads = rig.isr_share(node)
            log.info("partition: node %d cut off (%d ports); after %.0fs it is in %d ISR(s), leads %d partition(s)",
                     node, len(cut.ports), s.pause_s, in_isr, leads)
        except Exception as exc:  # noqa: BLE001 - evidence only, never a reason to keep the cut
            log.warning("partition: the cluster's view of node %d is unknown: %s", node, exc)
    return Window(start, now_ms())


def redis_restart(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    start = now_ms()
    rig.redis.stop()
    _hold(s.down_s)
    rig.redis.start()
    return Window(start, now_ms())


def redis_flush(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    start = now_ms()
    rig.redis.flush()
    return Window(start, now_ms())


def sick_downstream(rig: Rig, s: FaultSettings, _p: Poison) -> Window:
    start = now_ms()
    rig.sick_file.touch()
    _hold(s.sick_s)
    rig.sick_file.unlink()
    return Window(start, now_ms())


def _breaker_probe_s() -> float:
    """An open breaker waits REACH_HEALTH_OPEN_MS (30 s) before it probes, so the sick downstream's recovery can
    only show after that: its traffic after the fault lasts that long plus 30 s for the probes to pass (60 s in
    all by default, its recovery target)."""
    from reach.settings import HealthEnvSettings

    return HealthEnvSettings().open_ms / 1000 + 30.0


def poison(rig: Rig, s: FaultSettings, p: Poison) -> Window:
    start = now_ms()
    p.on.set()
    _hold(s.pause_s)
    p.on.clear()
    return Window(start, now_ms())


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("router-sigkill", Kind.PROCESS, "SIGKILL the router worker under load, restart it", router_sigkill),
    Scenario("agent-sigkill", Kind.AGENT, "SIGKILL one of two agent instances, start a new one", agent_sigkill),
    Scenario("leader-sigkill", Kind.BROKER, "SIGKILL the broker leading most partitions, restart it after "
             "REACH_FAULTS_DOWN_S", leader_sigkill),
    Scenario("redis-restart", Kind.REDIS, "kill the agents' Redis, start it empty after REACH_FAULTS_DOWN_S",
             redis_restart),
    Scenario("rolling-bounce", Kind.BROKER, "clean restart of each broker in turn, waiting for full ISR between",
             rolling_bounce),
    Scenario("broker-pause", Kind.BROKER, "SIGSTOP the busiest leader past replica.lag.time.max.ms, then SIGCONT",
             broker_pause),
    Scenario("partition", Kind.BROKER, "cut the busiest leader off from its peers and all clients (iptables, "
             "its own cgroup) for REACH_FAULTS_PAUSE_S, then heal", partition, unavailable=netsplit.unavailable),
    Scenario("agent-sigstop", Kind.AGENT, "SIGSTOP one agent instance past its session timeout, then SIGCONT",
             agent_sigstop),
    Scenario("worker-rebalance", Kind.PROCESS, "a second router worker joins under load, then leaves",
             worker_rebalance),
    Scenario("redis-flush", Kind.REDIS, "FLUSHALL on the agents' Redis mid-run", redis_flush),
    Scenario("sick-downstream", Kind.DOWNSTREAM, "every handler call fails (retryable) for REACH_FAULTS_SICK_S",
             sick_downstream, min_after_s=_breaker_probe_s),
    Scenario("poison", Kind.INPUT, "undecodable records and a control-topic reply_to mixed into the traffic",
             poison),
)
BY_NAME = {s.name: s for s in SCENARIOS}


def select(only: str | None) -> list[Scenario]:
    """The scenarios `--only a,b` names (in suite order), or all; an unknown name is a usage error."""
    from reach.errors import ConfigError

    if not only:
        return list(SCENARIOS)
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise ConfigError(f"unknown scenario(s) {', '.join(unknown)}: expected some of {', '.join(BY_NAME)}.")
    return [s for s in SCENARIOS if s.name in wanted]
