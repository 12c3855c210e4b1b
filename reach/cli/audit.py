"""`reach audit`: who changed what in the registry and the control plane, and when (reach.ops.audit renders
nothing; this prints). `reach audit sql` runs SQL over the same history (DuckDB, like `reach receipts sql`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import typer
from rich.table import Table

from reach import analytics
from reach.cli import receipts
from reach.cli.common import console, err_console
from reach.names import Names
from reach.ops import audit as ops_audit
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="The audit history of the registry and the control plane.", invoke_without_command=True)


@app.callback()
def audit(
    ctx: typer.Context,
    agent: str = typer.Option(None, "--agent", help="only this agent id or instance id"),
    since: str = typer.Option(None, "--since", help="ISO time, epoch ms, or an age like 15m / 2h / 1d"),
    until: str = typer.Option(None, "--until", help="same forms as --since; exclusive"),
    kind: list[str] = typer.Option([], "--kind", help="join, leave, version, capabilities, state, registration, "
                                   "ejected, restored, weights, instance, policy, canary, intent, app, operator "
                                   "(repeat or comma-separate)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List the audit events, oldest first: when, what, who, before -> after."""
    if ctx.invoked_subcommand is not None:
        return
    rows = ops_audit.history(names=Names(ReachSettings().namespace), kafka=KafkaSettings(), agent=agent,
                             since=since, until=until, kinds=kind)
    if as_json:
        print(json.dumps(rows, default=str))
        return
    if not rows:
        err_console.print("no audit events in that range")
        return
    table = Table("when (UTC)", "kind", "subject", "actor", "before", "after")
    for row in rows:
        actor = row["actor"] if row["actor_source"] == "authenticated" else f"{row['actor']} ({row['actor_source']})"
        table.add_row(_when(row["at"]), row["kind"], row["subject"], actor, _short(row["before"]),
                      _short(row["after"]))
    console.print(table)


@app.command()
def sql(
    statement: str = typer.Argument(None, help="SQL over the view `audit`, e.g. \"SELECT actor, kind, count(*) "
                                    "FROM audit GROUP BY ALL\""),
    file: Path = receipts.FILE,
    since: str = receipts.SINCE,
    until: str = receipts.UNTIL,
    fmt: str = receipts.FORMAT,
    out: Path = receipts.OUT,
) -> None:
    """Load the audit events appended in the time range into DuckDB (view `audit`) and run the query."""
    names, kafka = Names(ReachSettings().namespace), KafkaSettings()

    def load(since_ms: int | None, until_ms: int | None, workdir: Path, stats: analytics.LoadStats
             ) -> duckdb.DuckDBPyConnection:
        skipped = [0]
        events = ops_audit.read_events(names=names, kafka=kafka, since_ms=since_ms, until_ms=until_ms,
                                       skipped=skipped)
        con = analytics.load_table(ops_audit.sql_rows(events, stats), workdir, table="audit",
                                   columns=ops_audit.SQL_COLUMNS)
        stats.undecodable = skipped[0]
        return con

    receipts.run_sql(statement, file, since, until, fmt, out, load=load, what="audit event", view="audit",
            command="reach audit sql")


def _when(at: int) -> str:
    return datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(value: Any, limit: int = 60) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
