"""`reach agents [--json]`: the registered instances with state, capabilities, load, queue, heartbeat age and health
(breaker, 1-minute success, p95, slow share from `<ns>.health`; `--json` has every field of
reach.core.healthmodel.fields)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import typer
from rich.markup import escape
from rich.table import Table

from reach.cli.common import console
from reach.core.healthmodel.fields import breaker, share
from reach.names import Names
from reach.ops import agents as ops_agents
from reach.settings import KafkaSettings, ReachSettings


def agents(as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
           timeout: float = typer.Option(10.0, help="seconds to read the registry"),
           capability: str | None = typer.Option(None, "--capability", help="only instances declaring it"),
           agent: str | None = typer.Option(None, "--agent", help="only agent ids containing this"),
           state: str | None = typer.Option(None, "--state", help="only instances in this state (READY, OFFLINE...)"),
           limit: int = typer.Option(ops_agents.PAGE, "--limit", help="instances per page"),
           offset: int = typer.Option(0, "--offset", help="instances to skip (the next page: --offset + --limit)"),
           ) -> None:
    """List agent instances, a page at a time; an instance silent for more than 2 x ttl shows OFFLINE.

    running/queue come from each instance's last load report (about once a second), else its heartbeat."""
    kafka, names = KafkaSettings(), Names(ReachSettings().namespace)
    where = ops_agents.Where.of({"capability": capability or "", "agent": agent or "", "state": state or "",
                                 "limit": str(limit), "offset": str(offset)})
    listed, total = ops_agents.listing(kafka, names, timeout=timeout, where=where)
    rows = [row for _, row in listed]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print("No agent instances registered. Start one with `reach agent run MODULE:ATTR`." if not total
                      else f"No instance on this page: {total:,} match; try --offset 0.")
        return
    table = Table("agent", "instance", "state", "capabilities", "region", "running", "queue", "drain/s", "heartbeat",
                  "breaker", "success 1m", "p95", "slow")
    colour = {"READY": "green", "STARTING": "yellow", "DRAINING": "yellow", "OFFLINE": "red"}
    for r in rows:
        queue = "-" if r["queued"] is None else f"{r['queued']}/{r['max_queue']}"
        drain = "-" if r["drain_rate"] is None else f"{r['drain_rate']:.1f}"
        serves = ", ".join(_marked(c, r.get("subscribes") or (), r.get("filters")) for c in r["capabilities"])
        needs = f"\n[dim]depends on {escape(', '.join(r['depends_on']))}[/]" if r.get("depends_on") else ""
        owner = f"\n[dim]owner {escape(r['owner'])}[/]" if r.get("owner") else ""
        table.add_row(r["agent_id"] + owner, r["instance_id"], f"[{colour[r['state']]}]{r['state']}[/]",
                      serves + needs, r["region"] or "-",
                      f"{r['inflight']}/{r['max_concurrency']}", queue, drain,
                      f"{r['heartbeat_age_ms'] / 1000:.1f}s ago", breaker(r), share(r["success_1m"]),
                      "-" if r["p95_ms"] is None else f"{r['p95_ms']:.0f} ms", share(r["slow_ratio"]))
    console.print(table)
    if total > len(rows):
        more = f"; --offset {offset + len(rows)} for the next" if offset + len(rows) < total else ""
        console.print(f"[dim]{offset + 1:,}-{offset + len(rows):,} of {total:,} instances{more}[/]")


def _marked(capability: str, subscribes: Sequence[str], filters: Mapping[str, str] | None = None) -> str:
    """`name@version`, with ` (subscribe)` when the instance subscribes to it (a fan-out or notifications beside a
    handler, docs/agents.md), and its filter: ` (subscribe tags:urgent)`."""
    name = capability.partition("@")[0]
    if name not in subscribes:
        return capability
    found = (filters or {}).get(name)
    return f"{capability} (subscribe {escape(found)})" if found else f"{capability} (subscribe)"
