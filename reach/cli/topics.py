"""`reach topics plan|apply`: reconcile topics.yaml with the cluster."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.table import Table

from reach.cli.common import console
from reach.kafka import clients, topics
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="Topics as code: show and apply the diff between topics.yaml and the cluster.",
                  no_args_is_help=True)

_STYLE = {"create": "green", "alter": "yellow", "add_partitions": "cyan", "drift": "red"}


def _changes() -> tuple[list[topics.Change], object]:
    settings = ReachSettings()
    spec = topics.load(settings.topics_file)  # validated before anything touches the cluster
    admin = clients.admin(KafkaSettings())
    clients.check_reachable(admin)
    return topics.plan(admin, spec.resolved(Names(settings.namespace))), admin


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
def plan(as_json: bool = typer.Option(False, "--json")) -> None:
    """Print the diff between topics.yaml and the cluster (drift it will not fix is shown in red)."""
    changes, _ = _changes()
    _show(changes, as_json)


@app.command("apply")
def apply_(as_json: bool = typer.Option(False, "--json")) -> None:
    """Create, grow and reconfigure topics to match topics.yaml; a second apply changes nothing."""
    changes, admin = _changes()
    applied = topics.apply(admin, changes)  # type: ignore[arg-type]
    _show(applied, as_json)
    drift = [c for c in changes if c.action == "drift"]
    if drift and not as_json:
        console.print(f"[red]{len(drift)} drift item(s) left alone[/]: " + "; ".join(c.detail for c in drift))

