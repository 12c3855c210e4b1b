"""`reach agents [--json]`: the registered instances with state, capabilities, load and heartbeat age."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from reach.cli.common import console
from reach.envelopes import now_ms
from reach.names import Names
from reach.registry import InstanceInfo, read_registry
from reach.settings import KafkaSettings, ReachSettings


def _row(info: InstanceInfo) -> dict[str, Any]:
    reg = info.registration
    return {
        "agent_id": reg.agent_id, "instance_id": reg.instance_id, "state": info.effective_state.value,
        "reported_state": reg.state.value,
        "capabilities": [f"{c.name}@{c.version}" for c in reg.capabilities], "region": reg.region,
        "inflight": reg.inflight, "max_concurrency": reg.max_concurrency, "load": round(info.load, 3),
        "heartbeat_age_ms": info.heartbeat_age_ms, "ttl_ms": reg.ttl_ms,
        "assigned_partitions": reg.assigned_partitions, "inbox_topic": reg.inbox_topic,
    }


def agents(as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
           timeout: float = typer.Option(10.0, help="seconds to read the registry")) -> None:
    """List agent instances; an instance silent for more than 2 x ttl shows OFFLINE."""
    view = read_registry(KafkaSettings(), Names(ReachSettings().namespace), timeout=timeout)
    rows = [_row(i) for i in view.instances(now_ms())]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print("No agent instances registered. Start one with `reach agent run MODULE:ATTR`.")
        return
    table = Table("agent", "instance", "state", "capabilities", "region", "load", "heartbeat")
    colour = {"READY": "green", "STARTING": "yellow", "DRAINING": "yellow", "OFFLINE": "red"}
    for r in rows:
        table.add_row(r["agent_id"], r["instance_id"], f"[{colour[r['state']]}]{r['state']}[/]",
                      ", ".join(r["capabilities"]), r["region"] or "-",
                      f"{r['inflight']}/{r['max_concurrency']}", f"{r['heartbeat_age_ms'] / 1000:.1f}s ago")
    console.print(table)
