"""`reach soak`: the fault suite's rig (router, two ledger agents, a private Redis) under open-loop traffic for N
minutes with churn (reach.tooling.soak.plan), sampled every interval; then the drain, the checker's loss figures
and the growth verdict of every series (reach.tooling.soak.growth)."""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reach import control
from reach.core.retention import RESULT_TTL_S
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.ops import canary as ops_canary
from reach.records import CanaryState, InstanceAction
from reach.settings import ReachSettings
from reach.tooling.bench.cpu import broker_pid
from reach.tooling.faults import ledger_agent
from reach.tooling.faults.checker import Figures, Window, check, parse_ledger
from reach.tooling.faults.redis import RedisServer
from reach.tooling.faults.rig import Rig, Worker
from reach.tooling.faults.runner import Session, drain
from reach.tooling.faults.traffic import Traffic
from reach.tooling.local.infra import LocalInfra
from reach.tooling.soak import agents
from reach.tooling.soak.growth import Kind, Verdict, judge
from reach.tooling.soak.plan import Action, Event, canary_s, schedule
from reach.tooling.soak.sampler import KafkaReader, Sample, dir_mib, process_readings, redis_readings

log = logging.getLogger("reach.tooling.soak")

DEFAULT_RATE = 70.0
BROKER = "broker JVM"  # the series label of the local broker's process
"""Half the no-op knee of docs/performance.md's latest paired run on this project's reference machine (139/s)."""
BY = "reach-soak"
STATUS_RETENTION_S = ReachSettings.model_fields["status_retention"].default
DRAIN_WAIT_S = 60.0  # the drained instance's grace is 5 s; past this it is stopped and the miss reported
_INSTANCE = re.compile(r"as instance (\S+)")


@dataclass(frozen=True)
class SoakSettings:
    """How long, how fast, how often to sample, and the TTL the run's stores keep keys (None: the defaults)."""

    minutes: float
    rate: float = DEFAULT_RATE
    interval_s: float = 30.0
    ttl_s: int | None = None
    agent_every_s: float = 120.0
    drain_s: float = 120.0
    broker_shared: bool = False  # other work uses the broker meanwhile: its series are shown, not judged

    @property
    def duration_s(self) -> float:
        return self.minutes * 60

    def horizon_s(self, kind: Kind) -> float:
        """When what the run wrote at its start expires: a TTL-bound series levels off only after it (Redis keys
        live the result TTL, the status table's rows the status retention)."""
        if self.ttl_s is not None:
            return float(self.ttl_s)
        return float(STATUS_RETENTION_S if kind is Kind.ROCKSDB else RESULT_TTL_S)

    def env(self) -> dict[str, str]:
        if self.ttl_s is None:
            return {}
        ttl = str(self.ttl_s)
        return {"REACH_TERMINAL_TTL": ttl, "REACH_STATUS_RETENTION": ttl, agents.TTL_ENV: ttl}


@dataclass
class Report:
    """The run's samples, churn log, loss figures and growth verdicts; `misses` is empty when it passed."""

    settings: SoakSettings
    samples: list[Sample] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    figures: Figures | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    churn_misses: list[str] = field(default_factory=list)
    workdir: str = ""

    @property
    def misses(self) -> list[str]:
        out = list(self.churn_misses)
        if self.figures is None:
            out.append("no loss figures (the run did not finish)")
        else:
            if self.figures.lost:
                out.append(f"{self.figures.lost} lost")
            if self.figures.double_terminal:
                out.append(f"{self.figures.double_terminal} with two different terminal receipts")
        out += [f"{v.name} grows: +{v.rise:.1f} over the last half > {v.allowed:.1f}" for v in self.verdicts
                if v.grows]
        return out

    @property
    def ok(self) -> bool:
        return not self.misses

    def series(self) -> dict[tuple[Kind, str], list[tuple[float, float]]]:
        out: dict[tuple[Kind, str], list[tuple[float, float]]] = {}
        for s in self.samples:
            for key, value in s.values.items():
                out.setdefault(key, []).append((s.at_s, value))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "minutes": self.settings.minutes, "rate": self.settings.rate, "interval_s": self.settings.interval_s,
            "ttl_s": self.settings.ttl_s, "ok": self.ok, "misses": self.misses, "events": self.events,
            "figures": None if self.figures is None else self.figures.as_dict(), "crashes": self.crashes,
            "verdicts": [v.as_dict() for v in self.verdicts], "workdir": self.workdir,
            "samples": [{"at_s": round(s.at_s, 1), **{f"{k.value} {label}": round(v, 2)
                                                       for (k, label), v in s.values.items()}} for s in self.samples],
        }


def judge_all(report: Report) -> list[Verdict]:
    s = report.settings
    verdicts = [judge(f"{kind.value} {label}", kind, points, duration_s=s.duration_s, ttl_s=s.horizon_s(kind))
                for (kind, label), points in sorted(report.series().items())]
    if not s.broker_shared:
        return verdicts
    return [replace(v, judged=False, why_not="the broker serves other work meanwhile (--broker-shared)")
            if v.name.endswith(f" {BROKER}") else v for v in verdicts]


class Churn:
    """The rig's processes as the soak churns them: one steady agent, one churned slot, the canary, the router."""

    def __init__(self, rig: Rig, report: Report, *, canary_window_s: float) -> None:
        self.rig, self.report = rig, report
        self.steady, self.churned = rig.agents[0], rig.agents[1]
        self.canary: Worker | None = None
        self.draining: tuple[Worker, float] | None = None
        self.canary_s = canary_window_s

    def processes(self, redis_port: int) -> dict[str, int]:
        rig = self.rig
        out = {f"router pid {w.pid}": w.pid for w in rig.routers if w.proc is not None}
        for w in rig.agents:
            role = "steady" if w is self.steady else "canary" if w is self.canary else "churned"
            out[f"agent {role} pid {w.pid}"] = w.pid
        for label, pid in ((BROKER, broker_pid(rig.bootstrap)), ("redis-server", broker_pid(
                f"127.0.0.1:{redis_port}"))):
            if pid is not None:
                out[label] = pid
        return out

    def apply(self, event: Event) -> None:
        """Carry out one churn step; one that cannot be carried out is a miss of the run, not its end."""
        self.report.events.append(f"{event.at_s:.0f}s {event.action}")
        log.info("soak: %s at %.0f s", event.action, event.at_s)
        try:
            self._apply(event)
        except ReachError as exc:
            log.warning("soak: %s failed: %s", event.action, exc)
            self.report.churn_misses.append(f"{event.action}: {exc}")

    def _apply(self, event: Event) -> None:
        rig = self.rig
        if event.action is Action.RESTART_AGENT:
            if self.draining is not None:
                return  # the drain replaces this slot itself
            with rig.paused_supervisor():
                self.churned.stop()
                rig.agents.remove(self.churned)
                self.churned = rig.start_agent()
        elif event.action is Action.RESTART_ROUTER:
            with rig.paused_supervisor():
                old = rig.routers[0]
                old.stop()
                rig.routers.remove(old)
                rig.start_router(wait=False)  # same data dir: the status table is kept
        elif event.action is Action.DRAIN_AGENT:
            self._drain()
        elif event.action is Action.CANARY_START:
            with rig.paused_supervisor():
                self.canary = rig.start_agent(f"{agents.__name__}:{agents.CANARY}")
            # one step lasting the whole window: the canary neither promotes nor finishes before CANARY_END
            ops_canary.start(ledger_agent.AGENT_ID, version=agents.CANARY, steps=[20, 100],
                             step_ms=int(self.canary_s * 1000) + 60_000, min_success=0.9, by=BY,
                             names=rig.names, kafka=rig.kafka)
        elif event.action is Action.CANARY_END:
            try:
                ops_canary.finish(ledger_agent.AGENT_ID, CanaryState.ROLLED_BACK, by=BY, names=rig.names,
                                  kafka=rig.kafka)
            except ReachError as exc:  # the controller ended it first (its verdict is news, not a failure)
                self.report.events.append(f"canary already ended: {exc}")
            if self.canary is not None:
                with rig.paused_supervisor():
                    self.canary.stop()
                    rig.agents.remove(self.canary)
                self.canary = None

    def _drain(self) -> None:
        victim = self.churned
        instance = instance_id(victim.log)
        if instance is None:
            self.report.churn_misses.append(f"drain: no instance id in {victim.log.name}")
            return
        victim.expected_exit = True  # it exits 0 on its own: not a crash for the supervisor
        control.publish(control.instance_record(instance, InstanceAction.DRAIN, by=BY), names=self.rig.names,
                        kafka=self.rig.kafka)
        self.draining = (victim, time.monotonic())

    def tick(self) -> None:
        """Replace a drained instance once it has exited (or, past DRAIN_WAIT_S, stop it and note the miss)."""
        if self.draining is None:
            return
        victim, since = self.draining
        exited = victim.proc is not None and victim.proc.poll() is not None
        if not exited and time.monotonic() - since < DRAIN_WAIT_S:
            return
        if not exited:
            self.report.churn_misses.append(f"drain: the instance did not exit within {DRAIN_WAIT_S:.0f} s")
        else:
            self.report.events.append(f"drained instance exited {victim.proc.returncode if victim.proc else '?'} "
                                      f"after {time.monotonic() - since:.1f} s")
        with self.rig.paused_supervisor():
            victim.stop()
            self.rig.agents.remove(victim)
            self.churned = self.rig.start_agent()
        self.draining = None


def instance_id(agent_log: Path) -> str | None:
    """The instance id `reach agent run` logs at start."""
    try:
        found = _INSTANCE.findall(agent_log.read_text(errors="replace"))
    except OSError:
        return None
    return found[-1] if found else None


def run(settings: SoakSettings, *, infra: LocalInfra, workdir: Path,
        on_sample: Callable[[Sample], None] | None = None) -> Report:
    """The whole soak on the running cluster of `infra`; the report says what passed and what did not."""
    report = Report(settings)
    with RedisServer(workdir / "redis") as redis:
        session = Session(infra=infra, redis=redis, workdir=workdir, label="soak", env=settings.env(),
                          agent=f"{agents.__name__}:{agents.STABLE}")
        try:
            _soak(settings, session, redis, report, on_sample)
        finally:
            session.close()
    report.verdicts = judge_all(report)
    return report


def _soak(settings: SoakSettings, session: Session, redis: RedisServer, report: Report,
          on_sample: Callable[[Sample], None] | None) -> None:
    rig = session.rig
    report.workdir = str(rig.dir)
    churn = Churn(rig, report, canary_window_s=canary_s(settings.duration_s))
    reader = KafkaReader(kafka=rig.kafka, names=rig.names,
                         groups=[rig.names.agent_group(ledger_agent.AGENT_ID), rig.names.router_app_id])
    traffic = Traffic(kafka=rig.kafka, topic=rig.topic, capability=ledger_agent.CAPABILITY, rate=settings.rate)
    try:
        log.info("soak: %.0f min at %.0f req/s, a sample every %.0f s", settings.minutes, settings.rate,
                 settings.interval_s)
        traffic.start()
        start_ms, t0 = now_ms(), time.monotonic()
        events = deque(schedule(settings.duration_s, agent_every_s=settings.agent_every_s))
        next_sample = 0.0
        try:
            while (elapsed := time.monotonic() - t0) < settings.duration_s:
                churn.tick()
                if events and events[0].at_s <= elapsed:
                    churn.apply(events.popleft())
                elif elapsed >= next_sample:
                    sample = _sample(elapsed, churn, redis, reader, rig)
                    report.samples.append(sample)
                    next_sample += settings.interval_s
                    if on_sample is not None:
                        on_sample(sample)
                else:
                    time.sleep(min(1.0, next_sample - elapsed))  # the schedule's clock, not a wait on a condition
            report.samples.append(_sample(time.monotonic() - t0, churn, redis, reader, rig))
        finally:
            traffic.stop()
            end_ms = now_ms()
        churn.tick()
        drain(traffic, session.tail, settings.drain_s)
        report.figures = check(traffic.sent(), session.tail.seen(), parse_ledger(rig.ledger.read_text().splitlines()),
                               Window(start_ms, end_ms))
        report.crashes = list(rig.crashes)
    finally:
        reader.close()


def _sample(at_s: float, churn: Churn, redis: RedisServer, reader: KafkaReader, rig: Rig) -> Sample:
    values = process_readings(churn.processes(redis.port))
    values.update(redis_readings(redis.url))
    values[(Kind.ROCKSDB, "router data dir")] = dir_mib(sorted(p for p in rig.dir.glob("router-*") if p.is_dir()))
    values.update(reader.readings())
    return Sample(at_s, values)
