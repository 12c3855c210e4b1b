"""Agent instances as operators list them: registration, state, load, queue, heartbeat age and health (breaker,
1-minute success, p95, slow share from `<ns>.health`; every field of reach.core.healthmodel.fields)."""

from __future__ import annotations

from typing import Any

from reach.core.healthmodel.fields import health_fields
from reach.core.views.registryview import PAGE as PAGE
from reach.core.views.registryview import BadQuery as BadQuery
from reach.core.views.registryview import Where
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import codec, topicreader
from reach.names import Names
from reach.records import CapabilityMode, InstanceHealth, LoadReport
from reach.registry import InstanceInfo, read_registry
from reach.settings import KafkaSettings

REPORTS_WINDOW_MS = 10_000
"""Load reports older than this are not shown (instances report about once a second)."""


def latest_reports(kafka: KafkaSettings, names: Names, now: int) -> dict[str, LoadReport]:
    """The newest load report per instance from the last few seconds of `<ns>.loads` (none if it is missing)."""
    reports: dict[str, LoadReport] = {}
    consumer = topicreader.open_reader("agents", kafka)
    try:
        starts = topicreader.start_offsets(consumer, names.loads, now - REPORTS_WINDOW_MS)
        for msg in topicreader.read_range(consumer, names.loads, starts, idle_timeout=5.0):
            value = msg.value()
            if value is None:
                continue
            try:
                report = codec.decode(value, LoadReport)
            except codec.DecodeError:
                continue  # a foreign record is not this listing's business
            seen = reports.get(report.instance_id)
            if seen is None or report.at >= seen.at:
                reports[report.instance_id] = report
    except ReachError:
        return {}  # a namespace without the loads topic: the heartbeat's inflight still shows
    finally:
        consumer.close()
    return reports


def latest_health(kafka: KafkaSettings, names: Names, timeout: float = 5.0) -> dict[str, InstanceHealth]:
    """The compacted `<ns>.health` topic read to its end: the latest record per instance (none if it is missing)."""
    try:  # a foreign record is passed over: not this listing's business
        return topicreader.latest_records("agents-health", names.health, lambda v: codec.decode(v, InstanceHealth),
                                          kafka, skip=(codec.DecodeError,), idle_timeout=timeout)
    except ReachError:
        return {}  # a namespace from before health: every instance shows as healthy


def row(info: InstanceInfo, report: LoadReport | None, now: int,
        health: InstanceHealth | None = None) -> dict[str, Any]:
    """One instance as `reach agents --json` and the console's Agents page show it."""
    reg = info.registration
    return {
        "agent_id": reg.agent_id, "instance_id": reg.instance_id, "state": info.effective_state.value,
        "reported_state": reg.state.value,
        "capabilities": [f"{c.name}@{c.version}" for c in reg.capabilities], "region": reg.region,
        "subscribes": [c.name for c in reg.capabilities if c.mode is CapabilityMode.SUBSCRIBE],  # fan-out (0040)
        "idempotent": [c.name for c in reg.capabilities if c.idempotent],  # retried after a timeout (0075)
        "inflight": reg.inflight if report is None else report.inflight, "max_concurrency": reg.max_concurrency,
        "queued": None if report is None else report.queued,
        "max_queue": reg.max_queue if report is None else report.max_queue,
        "drain_rate": None if report is None else report.drain_rate,
        "load_report_age_ms": None if report is None else max(0, now - report.at),
        "load": round(info.load, 3),
        "heartbeat_age_ms": info.heartbeat_age_ms, "ttl_ms": reg.ttl_ms,
        "assigned_partitions": reg.assigned_partitions, "inbox_topic": reg.inbox_topic,
        "owner": reg.owner, "depends_on": list(reg.depends_on),
        **health_fields(health),
    }


def instances(kafka: KafkaSettings, names: Names, *, timeout: float,
              where: Where | None = None) -> list[tuple[InstanceInfo, dict[str, Any]]]:
    """Registered instances with their rows (load from its last report, else its heartbeat; health from
    `<ns>.health`): every one, or the page `where` asks for; the registry is read for at most `timeout` seconds."""
    return listing(kafka, names, timeout=timeout, where=where)[0]


def listing(kafka: KafkaSettings, names: Names, *, timeout: float,
            where: Where | None = None) -> tuple[list[tuple[InstanceInfo, dict[str, Any]]], int]:
    """`instances`, and how many instances match in all (the page is `where`'s, every one without it)."""
    view = read_registry(kafka, names, timeout=timeout)
    now = now_ms()
    shown, total = where.page(view, now) if where is not None else (view.instances(now), len(view))
    reports = latest_reports(kafka, names, now) if shown else {}
    health = latest_health(kafka, names) if shown else {}
    return [(i, row(i, reports.get(i.registration.instance_id), now, health.get(i.registration.instance_id)))
            for i in shown], total
