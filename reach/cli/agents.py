"""`reach agents [--json]`: the registered instances with state, capabilities, load, queue, heartbeat age and health
(breaker, 1-minute success, p95, slow share from `<ns>.health`; `--json` has every field of
reach.core.healthmodel.fields)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import typer
from rich.markup import escape
from rich.table import Table

from reach.cli.common import console
from reach.core.healthmodel.fields import breaker, share
from reach.names import Names
from reach.ops import agents as ops_agents
from reach.settings import KafkaSettings, ReachSettings


def agents(as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
           timeout: float = typer.Option(10.0, help="seconds to read the registry")) -> None:
    """List agent instances; an instance silent for more than 2 x ttl shows OFFLINE.

    running/queue come from each instance's last load report (about once a second), else its heartbeat."""
    kafka, names = KafkaSettings(), Names(ReachSettings().namespace)
    rows = [row for _, row in ops_agents.instances(kafka, names, timeout=timeout)]
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
        serves = ", ".join(_marked(c, r.get("subscribes") or ()) for c in r["capabilities"])
        needs = f"\n[dim]depends on {escape(', '.join(r['depends_on']))}[/]" if r.get("depends_on") else ""
        owner = f"\n[dim]owner {escape(r['owner'])}[/]" if r.get("owner") else ""
        table.add_row(r["agent_id"] + owner, r["instance_id"], f"[{colour[r['state']]}]{r['state']}[/]",
                      serves + needs, r["region"] or "-",
                      f"{r['inflight']}/{r['max_concurrency']}", queue, drain,
                      f"{r['heartbeat_age_ms'] / 1000:.1f}s ago", breaker(r), share(r["success_1m"]),
                      "-" if r["p95_ms"] is None else f"{r['p95_ms']:.0f} ms", share(r["slow_ratio"]))
    console.print(table)


def _marked(capability: str, subscribes: Sequence[str]) -> str:
    """`name@version`, with ` (subscribe)` when the instance subscribes to it (a fan-out, docs/agents.md)."""
    return f"{capability} (subscribe)" if capability.partition("@")[0] in subscribes else capability
