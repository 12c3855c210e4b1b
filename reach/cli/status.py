"""`reach status MESSAGE_ID` and `reach trace TRACE_ID`: one message's row, one trace's messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import typer
from rich.table import Table

from reach.cli.common import Exit, console
from reach.core.usage import format_micros
from reach.records import Status
from reach.settings import ReachSettings
from reach.webclient import auth_headers, get_json


def _base() -> str:
    return f"http://127.0.0.1:{ReachSettings().web_port}"


def _auth() -> dict[str, str]:
    return auth_headers(ReachSettings())


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


def _timeline(row: dict[str, Any]) -> Table:
    table = Table("gen", "attempt", "status", "at (UTC)", "+ms", "instance", "error",
                  title=f"{row['message_id']}  {row['capability']}  [bold]{row['status']}[/]")
    first = row["timeline"][0]["at"] if row["timeline"] else 0
    for step in row["timeline"]:
        err = step.get("error") or {}
        channel = step.get("channel") or {}  # a delivery step (SENT, DELIVERED, ...): which channel, the provider's id
        shown = f"{step['status']} via {channel['channel']} {channel.get('provider_message_id') or ''}".rstrip() \
            if channel else step["status"]
        table.add_row(str(step["generation"]), str(step["attempt"]), shown, _time(step["at"]),
                      str(step["at"] - first), step.get("instance_id") or "-",
                      f"{err.get('kind')}/{err.get('code')}: {err.get('message')}" if err else "")
    return table


def exit_for(status: str) -> int:
    """0 while in flight or COMPLETED, 1 for any other terminal status."""
    current = Status(status)
    return Exit.NOT_COMPLETED if current.is_terminal and current is not Status.COMPLETED else Exit.OK


def status(
    message_id: str = typer.Argument(..., help="The message_id `reach send` printed."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show where one message is: status, agent, attempt, result or error, its timeline, and the fallback that serves
    it (exit 0 when that chain COMPLETED)."""
    row = get_json(_base(), f"/messages/{quote(message_id, safe='')}", auth=_auth())
    if as_json:
        print(json.dumps(row))
    else:
        console.print(_timeline(row))
        if row.get("result") is not None:
            console.print(f"result: {row['result']}")
        if row.get("last_error"):
            console.print(f"last error: {row['last_error']}")
        _fallback(row)
        _fanout(row)
        if row.get("usage"):
            console.print(f"usage: {usage_line(row['usage'])}", highlight=False)
        if row.get("children_usage"):  # what the requests it caused and waited for spent (0043)
            console.print(f"children's usage: {usage_line(row['children_usage'])}", highlight=False)
        for turn in row.get("turns") or []:
            console.print(f"turn {turn['turn']}: {turn['question']} -> {turn['answer']}", highlight=False)
        asked = row.get("input")
        if asked:  # INPUT_REQUIRED: what to answer, and how
            console.print(f"asks: {asked['question']}\n  answer schema: {asked['answer_schema']}\n"
                          f"  answer with: reach answer {message_id} --payload JSON", highlight=False)
    raise typer.Exit(exit_for(final_status(row)))


def final_status(row: dict[str, Any]) -> str:
    """The message's outcome: its own status, or, when a fallback serves it, the last status down the chain."""
    status, served = row["status"], row.get("fallback")
    while isinstance(served, dict) and served.get("message_id"):
        status = served.get("status") or Status.ACCEPTED.value  # sent, not folded yet: still in flight
        served = served.get("fallback")
    return str(status)


def _fallback(row: dict[str, Any]) -> None:
    """The fallback that serves the message (reach.core.fallback), down the chain."""
    served = row.get("fallback")
    while isinstance(served, dict):
        if served.get("message_id"):
            console.print(f"fallback: {served['capability']} {served['message_id']} "
                          f"[bold]{served.get('status') or 'not folded yet'}[/]")
        else:
            console.print(f"fallback: {served['capability']} not sent: {served.get('note')}")
        served = served.get("fallback")


def _fanout(row: dict[str, Any]) -> None:
    """A fan-out parent's deliveries and how each ended, or the event a delivery carries (reach.core.fanout)."""
    book = row.get("fanout") or {}
    deliveries = book.get("deliveries") or []
    if deliveries:
        done = sum(1 for d in deliveries if d.get("status") == Status.COMPLETED.value)
        console.print(f"fan-out: {done}/{len(deliveries)} deliveries completed", highlight=False)
        for d in deliveries:
            console.print(f"  {d['agent_id']} {d['message_id']} [bold]{d.get('status') or 'running'}[/]",
                          highlight=False)
    if book.get("of"):
        console.print(f"delivery of: {book['of']}", highlight=False)


def usage_line(used: dict[str, Any]) -> str:
    """The status row's usage (ctx.usage) in one line: `100 in + 50 out tokens, demo-small, 0.002 USD`."""
    parts = [f"{used.get('input_tokens', 0)} in + {used.get('output_tokens', 0)} out tokens"]
    if used.get("model"):
        parts.append(str(used["model"]))
    if used.get("cost_micros") is not None:
        parts.append(f"{format_micros(int(used['cost_micros']))} {used.get('currency') or ''}".rstrip())
    return ", ".join(parts)


def trace(
    trace_id: str = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show every message of a trace with its timeline."""
    index = get_json(_base(), f"/traces/{quote(trace_id, safe='')}", auth=_auth())
    rows = [get_json(_base(), f"/messages/{quote(mid, safe='')}", auth=_auth()) for mid in index["message_ids"]]
    if as_json:
        print(json.dumps({"trace_id": trace_id, "messages": rows}))
        return
    for row in rows:
        console.print(_timeline(row))
        _fallback(row)
        _fanout(row)
