"""`reach handoff ls|show|take|resolve`: requests nobody could serve, answered or re-routed by a human."""

from __future__ import annotations

import getpass
import json

import typer
from rich.table import Table

from reach.cli.common import console
from reach.intent.desk import HandoffDesk
from reach.intent.errors import IntentError
from reach.intent.handoff import Handoff
from reach.names import Names
from reach.ops import handoff as ops_handoff
from reach.settings import KafkaSettings, ReachSettings, RedisSettings

app = typer.Typer(help="Requests handed to a human: list, show, take, resolve.", no_args_is_help=True)


def _desk() -> HandoffDesk:
    return ops_handoff.desk(Names(ReachSettings().namespace), KafkaSettings(), RedisSettings())


def _operator(by: str | None) -> str:
    return by or getpass.getuser()


@app.command("ls")
def ls(
    all_: bool = typer.Option(False, "--all", help="also the answered and re-routed ones"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Open (and taken) handoffs, oldest first."""
    rows = ops_handoff.queue(_desk(), all_=all_)
    if as_json:
        console.print_json(json.dumps([ops_handoff.summary(h) for h in rows]))
        return
    table = Table("message_id", "state", "taken by", "from", "intent / capability", "reason")
    for h in rows:
        table.add_row(h.message_id, h.state, h.taken_by or "-", h.origin, (h.intent or h.capability or "")[:60],
                      h.reason[:60])
    console.print(table)


@app.command("show")
def show(message_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """The context bundle: the request, the trace so far, the candidates and why each was rejected."""
    found = _desk().get(message_id)
    if as_json:
        console.print_json(found.model_dump_json(exclude={"envelope"}))
        return
    _print(found)


@app.command("take")
def take(message_id: str = typer.Argument(...), by: str | None = typer.Option(None, "--by")) -> None:
    """Claim a handoff (others see who has it)."""
    moved = ops_handoff.take(_desk(), message_id, by=_operator(by))
    console.print(f"{moved.message_id} taken by {moved.taken_by}", highlight=False)


@app.command("resolve")
def resolve(
    message_id: str = typer.Argument(...),
    answer: str | None = typer.Option(None, "--answer", help="the answer (JSON, or text): completes the message"),
    capability: str | None = typer.Option(None, "--capability", help="re-route to this capability and map the "
                                          "intent to it"),
    by: str | None = typer.Option(None, "--by"),
) -> None:
    """Answer a handoff (COMPLETED, marked human) or re-route it to a capability."""
    if (answer is None) == (capability is None):
        raise IntentError("Give exactly one of --answer TEXT (completes the message) or --capability NAME "
                          "(re-routes it and maps the intent).")
    moved = ops_handoff.resolve(_desk(), message_id, by=_operator(by), answer=answer,
                                capability=capability)
    console.print(f"{moved.message_id} {moved.state} by {moved.resolved_by}: {moved.resolution}", highlight=False)


def _print(h: Handoff) -> None:
    console.print(f"[bold]{h.message_id}[/] {h.state} (version {h.version})  tenant {h.tenant}  trace {h.trace_id}",
                  highlight=False)
    if h.origin == "router":
        console.print(f"  capability {h.capability} (no instance served it; its policy asks for a human)",
                      highlight=False)
    console.print(f"  intent    {h.intent or '-'}", highlight=False)
    console.print(f"  reason    {h.reason}", highlight=False)
    console.print(f"  payload   {h.payload_preview}", highlight=False)
    if h.session_snapshot:
        console.print(f"  snapshot  {h.session_snapshot}", highlight=False)
    for c in h.candidates:
        console.print(f"  candidate {c.capability} {c.score:.3f} ({c.source}): {c.reason or 'taken'}", highlight=False)
    for step in h.trace:
        console.print(f"  step      {step.status} at {step.at} {step.detail}", highlight=False)
