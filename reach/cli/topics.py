"""`reach topics plan|apply`: reconcile topics.yaml with the cluster."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.table import Table

from reach.cli.common import console, err_console
from reach.kafka import clients, topics
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="Topics as code: show and apply the diff between topics.yaml and the cluster.",
                  no_args_is_help=True)

_STYLE = {"create": "green", "alter": "yellow", "add_partitions": "cyan", "drift": "red", "over_budget": "red"}


def _changes(agents: int = 0) -> tuple[list[topics.Change], object]:
    """The plan, and when the namespace (with the plan applied and `agents` more inboxes) would carry more replicas
    on a broker than topics.yaml's budget, an `over_budget` item (left alone by apply, like drift)."""
    settings = ReachSettings()
    spec = topics.load(settings.topics_file)  # validated before anything touches the cluster
    admin = clients.admin(KafkaSettings())
    clients.check_reachable(admin)
    names = Names(settings.namespace)
    changes = topics.plan(admin, spec.resolved(names)) + topics.inbox_growth(admin, spec, names)
    used = topics.footprint(admin, spec, settings.namespace, changes, agents=agents)
    if used.over:
        changes.append(topics.Change("over_budget", f"{settings.namespace}.*", used.describe() + (
            f" with {agents:,} more agents" if agents else "") + "; size inboxes by agent in topics.yaml "
            "(families.agent.sizes), or add brokers (docs/decisions/0068)"))
    else:
        err_console.print(f"[dim]{used.describe()}" + (f" with {agents:,} more agents" if agents else "") + "[/]")
    return changes, admin


def _show(changes: list[topics.Change], as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps([{k: v for k, v in asdict(c).items() if k != "spec"} for c in changes]))
        return
    if not changes:
        console.print("No changes")
        return
    table = Table("action", "topic", "detail")
    for c in changes:
        table.add_row(f"[{_STYLE[c.action]}]{c.action}[/]", c.topic, c.detail)
    console.print(table)


@app.command()
def plan(as_json: bool = typer.Option(False, "--json"),
         agents: int = typer.Option(0, "--agents", min=0,
                                    help="also count this many more agent inboxes (sized by `agent://*` in "
                                    "families.agent.sizes, else the family)"),
         ) -> None:
    """Print the diff between topics.yaml and the cluster (drift it will not fix and a namespace over its partition
    budget are shown in red)."""
    changes, _ = _changes(agents)
    _show(changes, as_json)


@app.command("apply")
def apply_(as_json: bool = typer.Option(False, "--json")) -> None:
    """Create, grow and reconfigure topics to match topics.yaml; a second apply changes nothing."""
    changes, admin = _changes()
    applied = topics.apply(admin, changes)  # type: ignore[arg-type]
    _show(applied, as_json)
    drift = [c for c in changes if c.action in ("drift", "over_budget")]
    if drift and not as_json:
        console.print(f"[red]{len(drift)} drift item(s) left alone[/]: " + "; ".join(c.detail for c in drift))

