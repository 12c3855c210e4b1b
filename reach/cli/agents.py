"""`reach agents [--json]`: the registered instances with state, capabilities, load, queue, heartbeat age and health
(breaker, 1-minute success, p95, slow share from `<ns>.health`; `--json` has every field of
reach.core.health.fields)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from reach import codec, topicreader
from reach.cli.common import console
from reach.core.health.fields import breaker, health_fields, share
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.names import Names
from reach.records import InstanceHealth, LoadReport
from reach.registry import InstanceInfo, read_registry
from reach.settings import KafkaSettings, ReachSettings

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
                continue  # a foreign record is not this command's business
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
    try:  # a foreign record is passed over: not this command's business
        return topicreader.latest_records("agents-health", names.health, lambda v: codec.decode(v, InstanceHealth),
                                          kafka, skip=(codec.DecodeError,), idle_timeout=timeout)
    except ReachError:
        return {}  # a namespace from before health: every instance shows as healthy


def _row(info: InstanceInfo, report: LoadReport | None, now: int,
         health: InstanceHealth | None = None) -> dict[str, Any]:
    reg = info.registration
    return {
        "agent_id": reg.agent_id, "instance_id": reg.instance_id, "state": info.effective_state.value,
        "reported_state": reg.state.value,
        "capabilities": [f"{c.name}@{c.version}" for c in reg.capabilities], "region": reg.region,
        "inflight": reg.inflight if report is None else report.inflight, "max_concurrency": reg.max_concurrency,
        "queued": None if report is None else report.queued,
        "max_queue": reg.max_queue if report is None else report.max_queue,
        "drain_rate": None if report is None else report.drain_rate,
        "load_report_age_ms": None if report is None else max(0, now - report.at),
        "load": round(info.load, 3),
        "heartbeat_age_ms": info.heartbeat_age_ms, "ttl_ms": reg.ttl_ms,
        "assigned_partitions": reg.assigned_partitions, "inbox_topic": reg.inbox_topic,
        **health_fields(health),
    }


def agents(as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
           timeout: float = typer.Option(10.0, help="seconds to read the registry")) -> None:
    """List agent instances; an instance silent for more than 2 x ttl shows OFFLINE.

    running/queue come from each instance's last load report (about once a second), else its heartbeat."""
    kafka, names = KafkaSettings(), Names(ReachSettings().namespace)
    view = read_registry(kafka, names, timeout=timeout)
    now = now_ms()
    reports = latest_reports(kafka, names, now) if len(view) else {}
    health = latest_health(kafka, names) if len(view) else {}
    rows = [_row(i, reports.get(i.registration.instance_id), now, health.get(i.registration.instance_id))
            for i in view.instances(now)]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print("No agent instances registered. Start one with `reach agent run MODULE:ATTR`.")
        return
    table = Table("agent", "instance", "state", "capabilities", "region", "running", "queue", "drain/s", "heartbeat",
                  "breaker", "success 1m", "p95", "slow")
    colour = {"READY": "green", "STARTING": "yellow", "DRAINING": "yellow", "OFFLINE": "red"}
    for r in rows:
        queue = "-" if r["queued"] is None else f"{r['queued']}/{r['max_queue']}"
        drain = "-" if r["drain_rate"] is None else f"{r['drain_rate']:.1f}"
        table.add_row(r["agent_id"], r["instance_id"], f"[{colour[r['state']]}]{r['state']}[/]",
                      ", ".join(r["capabilities"]), r["region"] or "-",
                      f"{r['inflight']}/{r['max_concurrency']}", queue, drain,
                      f"{r['heartbeat_age_ms'] / 1000:.1f}s ago", breaker(r), share(r["success_1m"]),
                      "-" if r["p95_ms"] is None else f"{r['p95_ms']:.0f} ms", share(r["slow_ratio"]))
    console.print(table)
