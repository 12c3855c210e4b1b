"""`reach operators create|ls|revoke`: who may use the console at /console (docs/console.md)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from reach.appstore import KafkaAppLog
from reach.cli.common import console, err_console, operator_id
from reach.gateway.settings import GatewaySettings
from reach.names import Names
from reach.ops import operators as ops_operators
from reach.ops.operators import DEFAULT_REDRIVE_RATE, ROLES, OperatorStore
from reach.secretbox import secret_box
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="Console operators: viewer (reads) or admin (also redrives, drains, tunes routing).",
                  no_args_is_help=True)


def _store(*, making_tokens: bool = False) -> OperatorStore:
    reach = ReachSettings()
    box = secret_box(GatewaySettings().secrets_key, reach.home, create=True) if making_tokens else None
    return OperatorStore(log=KafkaAppLog(names=Names(reach.namespace), kafka=KafkaSettings()), box=box,
                         by=operator_id(reach))


@app.command()
def create(
    name: str = typer.Argument(..., help="who this is, e.g. alice"),
    role: str = typer.Option(..., "--role", help=f"one of {', '.join(ROLES)}"),
    redrive_rate: float = typer.Option(DEFAULT_REDRIVE_RATE, "--redrive-rate",
                                       help="the most messages per second this operator's redrives send"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Create an operator; prints its token (shown only here): log in at /console/login with it."""
    made = ops_operators.create(_store(making_tokens=True), name=name, role=role, redrive_rate=redrive_rate)
    if as_json:
        console.print_json(json.dumps(ops_operators.token(made, name=name, role=role)))
        return
    console.print(f"operator_id  {made.operator_id}\nrole         {role}\ntoken        {made.token}",
                  highlight=False)
    err_console.print("The token is shown only now. Log in at /console/login, or send it as "
                      "`Authorization: Bearer <token>` to /console/api/*.", highlight=False)


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """List operators (never a token)."""
    records = ops_operators.listing(_store())
    if as_json:
        console.print_json(json.dumps([ops_operators.summary(r) for r in records]))
        return
    table = Table("operator_id", "name", "role", "redrive/s", "state")
    for r in records:
        table.add_row(r.app_id, r.name, r.role or "", f"{r.rate:g}", "revoked" if r.revoked else "active")
    console.print(table)


@app.command()
def revoke(operator_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """Revoke an operator: its token stops working on every gateway within about a second."""
    record = ops_operators.revoke(_store(), operator_id)
    if as_json:
        console.print_json(json.dumps(ops_operators.summary(record)))
    else:
        console.print(f"operator {operator_id} revoked", highlight=False)
