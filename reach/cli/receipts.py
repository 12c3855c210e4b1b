"""`reach receipts sql`: SQL over the receipts stream for analysts (DuckDB)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import duckdb
import typer
from rich.table import Table

from reach import analytics
from reach.cli.common import console, err_console
from reach.errors import ConfigError
from reach.kafka import topicreader
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings
from reach.timeparse import parse_time

app = typer.Typer(help="Query receipts with SQL.", no_args_is_help=True)

FORMATS = ("table", "csv", "json", "parquet")

# The options every `... sql` command takes (`reach receipts sql`, `reach audit sql`).
FILE = typer.Option(None, "--file", "-f", help="Read the SQL from a file (e.g. docs/queries/*.sql).")
SINCE = typer.Option(None, "--since", help="ISO time, epoch ms, or an age like 15m / 2h / 1d.")
UNTIL = typer.Option(None, "--until", help="Same forms as --since; exclusive.")
FORMAT = typer.Option("table", "--format", help="table | csv | json | parquet")
OUT = typer.Option(None, "--out", help="Write the result to this file (required for parquet).")


@app.command()
def sql(
    statement: str = typer.Argument(None, help="SQL over the view `receipts`, e.g. \"SELECT status, count(*) "
                                    "FROM receipts GROUP BY 1\""),
    file: Path = FILE,
    since: str = SINCE,
    until: str = UNTIL,
    fmt: str = FORMAT,
    out: Path = OUT,
) -> None:
    """Load the receipts of the time range (offsets looked up by timestamp) into DuckDB and run the query."""
    names = Names(ReachSettings().namespace)

    def load(since_ms: int | None, until_ms: int | None, workdir: Path, stats: analytics.LoadStats
             ) -> duckdb.DuckDBPyConnection:
        consumer = topicreader.open_reader("receipts-sql", KafkaSettings())
        try:
            return analytics.load(analytics.read_receipts(consumer, names.receipts, since_ms, until_ms, stats),
                                  workdir)
        finally:
            consumer.close()

    run_sql(statement, file, since, until, fmt, out, load=load, what="receipt")


Loader = Callable[[int | None, int | None, Path, analytics.LoadStats], duckdb.DuckDBPyConnection]


def run_sql(statement: str | None, file: Path | None, since: str | None, until: str | None, fmt: str,
            out: Path | None, *, load: Loader, what: str, view: str = "receipts",
            command: str = "reach receipts sql") -> None:
    """The options of a `... sql` command checked, the time range loaded by `load`, the query run and printed."""
    if file is not None:
        try:
            statement = file.read_text()
        except OSError as exc:
            raise ConfigError(f"Cannot read {file}: {exc.strerror}.") from None
    if not statement:
        raise ConfigError("Give the SQL as an argument or with --file.")
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}.")
    if fmt == "parquet" and out is None:
        raise ConfigError("--format parquet needs --out FILE.")
    since_ms, until_ms = parse_time(since), parse_time(until)
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ConfigError("--until must be later than --since.")
    stats = analytics.LoadStats()
    with analytics.temp_workdir() as tmp:
        con = load(since_ms, until_ms, Path(tmp), stats)
        if out is not None and fmt != "table":
            analytics.export(con, statement, fmt, out)
            err_console.print(f"wrote {out} ({stats.rows} {what}s loaded)")
            return
        columns, rows = analytics.query(con, statement, view=view, command=command)
    if stats.undecodable:
        err_console.print(f"[yellow]skipped {stats.undecodable} undecodable {what}(s)[/]")
    _print(columns, rows, fmt)


def _print(columns: list[str], rows: list[tuple[object, ...]], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([dict(zip(columns, row, strict=True)) for row in rows], default=str))
        return
    if fmt == "csv":
        import csv
        import sys

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    console.print(table)
