"""Runs scenarios against a real cluster: rig up, traffic, fault, drain, the checker's figures and verdict."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reach.tooling.faults import ledger_agent
from reach.tooling.faults.checker import TERMINAL, Figures, Seen, Sent, Window, check, parse_ledger
from reach.tooling.faults.redis import RedisServer
from reach.tooling.faults.rig import LEDGER_AGENT, Rig, wait_until
from reach.tooling.faults.scenarios import Kind, Poison, Scenario
from reach.tooling.faults.settings import FaultSettings
from reach.tooling.faults.traffic import ReceiptTail, Traffic
from reach.tooling.local.infra import LocalInfra

log = logging.getLogger("reach.tooling.faults")


@dataclass(frozen=True)
class Result:
    """One scenario's figures, the fault's length and whether it met its targets (and if not, why)."""

    scenario: Scenario
    figures: Figures
    fault_s: float
    rate: float
    misses: tuple[str, ...]
    workdir: str
    crashes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.misses

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.name, "kind": str(self.scenario.kind), **self.figures.as_dict(),
                "fault_s": self.fault_s, "rate": self.rate, "ok": self.ok, "misses": list(self.misses),
                "restarts": len(self.crashes), "crashes": list(self.crashes), "workdir": self.workdir}


def verdict(scenario: Scenario, figures: Figures) -> tuple[str, ...]:
    """The targets a scenario missed: 0 lost, 0 double terminal, 0 repeated effects outside the agent, recovery."""
    misses = []
    if figures.lost:
        misses.append(f"{figures.lost} lost")
    if figures.double_terminal:
        misses.append(f"{figures.double_terminal} double terminal")
    if figures.double_side_effects and not scenario.repeats_allowed:
        misses.append(f"{figures.double_side_effects} double side effects")
    elif scenario.kind is Kind.AGENT and figures.double_side_effects > figures.in_flight:
        misses.append(f"{figures.double_side_effects} double side effects > {figures.in_flight} in flight")
    if figures.recovery_s is None:
        misses.append("no COMPLETED after the fault")
    elif figures.recovery_s > scenario.recovery_target_s:
        misses.append(f"recovery {figures.recovery_s}s > {scenario.recovery_target_s:.0f}s")
    return tuple(misses)


class Session:
    """A rig brought up once (namespace, receipt tail, router, two agents) that one or more scenarios run on."""

    def __init__(self, *, infra: LocalInfra, redis: RedisServer, workdir: Path, label: str,
                 env: dict[str, str] | None = None, agent: str = LEDGER_AGENT) -> None:
        self.rig = Rig(infra=infra, redis=redis, workdir=workdir, scenario=label, env=env, agent=agent)
        self.rig.create_topics()
        self.tail = ReceiptTail(kafka=self.rig.kafka, topic=self.rig.names.receipts)
        try:
            self.rig.start_router()
            for _ in range(2):
                self.rig.start_agent()
            self.rig.wait_ready()
            self.rig.supervise()
        except BaseException:
            self.close()
            raise
        log.info("rig ready (%s)", self.rig.dir)

    def measure(self, scenario: Scenario, settings: FaultSettings) -> Result:
        """Traffic, warm-up, the fault, traffic after it, the drain: then the checker on this scenario's messages."""
        rig = self.rig
        crashes_before = len(rig.crashes)
        poison = Poison(control_topic=rig.names.control)
        traffic = Traffic(kafka=rig.kafka, topic=rig.topic, capability=ledger_agent.CAPABILITY, rate=settings.rate,
                          extra=poison if scenario.kind is Kind.INPUT else None)
        try:
            log.info("%s: traffic at %.0f/s", scenario.name, settings.rate)
            traffic.start()
            time.sleep(settings.warmup_s)  # phase lengths define the experiment
            window = scenario.inject(rig, settings, poison)
            log.info("%s: fault over after %.1fs", scenario.name, (window.end_ms - window.start_ms) / 1000)
            time.sleep(scenario.after_s(settings))
        finally:
            traffic.stop()
        drain(traffic, self.tail, settings.drain_s)
        if scenario.kind is Kind.BROKER:
            wait_until(rig.fully_replicated, 120, "every partition fully in sync again", interval=0.5)
        sent, seen = traffic.sent(), self.tail.seen()
        _dump(rig.dir / scenario.name, sent=sent, seen=seen, window=window)
        figures = check(sent, seen, parse_ledger(rig.ledger.read_text().splitlines()), window)
        return Result(scenario=scenario, figures=figures, fault_s=round((window.end_ms - window.start_ms) / 1000, 2),
                      rate=settings.rate, misses=verdict(scenario, figures), workdir=str(rig.dir),
                      crashes=tuple(rig.crashes[crashes_before:]))

    def close(self) -> None:
        self.rig.stop_all()
        self.tail.close()
        self.rig.delete_topics()


def _dump(where: Path, *, sent: list[Sent], seen: list[Seen], window: Window) -> None:
    """The run's evidence beside its ledger: what was sent and every receipt, one JSON object a line."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "window.json").write_text(json.dumps(asdict(window)))
    for name, rows in (("sent.jsonl", sent), ("receipts.jsonl", seen)):
        with open(where / name, "w") as out:
            out.writelines(json.dumps(asdict(row)) + "\n" for row in rows)


def drain(traffic: Traffic, tail: ReceiptTail, timeout: float) -> None:
    """Until every acknowledged message has a terminal receipt, or `timeout` (what is left is reported lost)."""
    acked = {s.message_id for s in traffic.sent() if s.acked}

    def done() -> bool:
        ended = {r.message_id for r in tail.seen() if r.status in TERMINAL}
        return acked <= ended

    try:
        wait_until(done, timeout, "a terminal receipt for every acknowledged message", interval=0.5)
    except Exception as exc:  # noqa: BLE001 - the checker reports what is missing
        log.warning("%s", exc)


def run(scenarios: list[Scenario], *, infra: LocalInfra, settings: FaultSettings, workdir: Path,
        shared: bool = False, on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Every scenario in turn on the running cluster of `infra`, sharing one private Redis; each on a fresh rig
    (namespace, router, agents), or with `shared` all on one (faster: one start-up instead of one per scenario)."""
    results = []
    with RedisServer(workdir / "redis") as redis:
        session: Session | None = None
        try:
            for scenario in scenarios:
                reason = scenario.unavailable()
                if reason is not None:  # e.g. partition without root or iptables: the others still run
                    log.warning("%s skipped: %s", scenario.name, reason)
                    continue
                if session is None:
                    label = "shared" if shared else scenario.name
                    session = Session(infra=infra, redis=redis, workdir=workdir, label=label)
                result = session.measure(scenario, settings)
                if not shared:
                    session.close()
                    session = None
                results.append(result)
                if on_result is not None:
                    on_result(result)
        finally:
            if session is not None:
                session.close()
    return results
