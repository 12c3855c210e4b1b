"""`reach receipts sql`: the receipts stream for a time range, as a flat DuckDB view named `receipts` with the view
`usage` over it (and the loading `reach audit sql` shares for its `audit` view)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from reach.errors import ReachError
from reach.kafka import codec, topicreader
from reach.kafka.codec import DecodeError
from reach.kafka.types import Consumer
from reach.records import TERMINAL, Receipt


class QueryError(ReachError):
    """The SQL did not run (syntax, unknown column, ...)."""


# One column per field; timestamps as TIMESTAMP (UTC). The receipt's `at` is `ts` (AT is reserved in SQL).
COLUMNS: dict[str, str] = {
    "message_id": "VARCHAR", "generation": "INTEGER", "trace_id": "VARCHAR", "tenant": "VARCHAR",
    "capability": "VARCHAR", "agent_id": "VARCHAR", "instance_id": "VARCHAR", "status": "VARCHAR",
    "attempt": "INTEGER", "ts": "TIMESTAMP", "error_kind": "VARCHAR", "error_code": "VARCHAR",
    "error_message": "VARCHAR", "retry_after_ms": "BIGINT", "result": "VARCHAR", "step_status": "VARCHAR",
    "cost": "DOUBLE", "due_at": "TIMESTAMP", "timings": "JSON", "candidates": "INTEGER",
    "picked_instance": "VARCHAR", "picked_score": "DOUBLE", "inbox_topic": "VARCHAR",
    "inbox_partition": "INTEGER", "inbox_offset": "BIGINT", "kafka_partition": "INTEGER",
    "kafka_offset": "BIGINT", "kafka_timestamp": "TIMESTAMP", "arm": "VARCHAR", "admission": "VARCHAR",
    "callback": "VARCHAR", "channel": "VARCHAR", "provider_message_id": "VARCHAR", "callback_id": "VARCHAR",
    "input_tokens": "BIGINT", "output_tokens": "BIGINT", "model": "VARCHAR", "cost_micros": "BIGINT",
    "currency": "VARCHAR", "source": "VARCHAR", "app_id": "VARCHAR",
}
APP_SOURCE = "gateway:"  # the source of a gateway app's envelopes (reach.gateway.intake.source_of)
TERMINALS = ", ".join(f"'{s}'" for s in sorted(TERMINAL))
# One row per (message_id, generation): its first terminal receipt (all receipts of a message share a partition,
# so offset order is arrival order), where that receipt carried usage (Receipt v9). What limits count, too. The
# children_* columns: what the requests it caused and waited for spent (the receipt's timings, reach.core.allowance).
USAGE_VIEW = f"""
CREATE VIEW usage AS
SELECT message_id, generation, trace_id, tenant, capability, agent_id, instance_id, status, attempt, ts,
       CAST(ts AS DATE) AS day, input_tokens, output_tokens, input_tokens + output_tokens AS tokens, model,
       cost_micros, cost_micros / 1e6 AS cost, currency, source, app_id,
       coalesce(CAST(json_extract(timings, '$.children_input_tokens') AS BIGINT), 0)
         + coalesce(CAST(json_extract(timings, '$.children_output_tokens') AS BIGINT), 0) AS children_tokens,
       coalesce(CAST(json_extract(timings, '$.children_cost_micros') AS BIGINT), 0) AS children_cost_micros
FROM (SELECT * FROM receipts WHERE status IN ({TERMINALS})
      QUALIFY row_number() OVER (PARTITION BY message_id, generation
                                 ORDER BY kafka_partition, kafka_offset NULLS LAST, ts) = 1)
WHERE input_tokens IS NOT NULL
"""


@dataclass
class LoadStats:
    """What was read: rows loaded and receipts skipped because they did not decode."""

    rows: int = 0
    undecodable: int = 0


def flatten(receipt: Receipt) -> dict[str, Any]:
    """One receipt as one flat row (timestamps still epoch millis; DuckDB converts them)."""
    decision = receipt.decision
    picked = None
    if decision and decision.picked_instance:
        picked = next((c.score for c in decision.candidates if c.instance_id == decision.picked_instance), None)
    err = receipt.error
    return {
        "message_id": receipt.message_id, "generation": receipt.generation, "trace_id": receipt.trace_id,
        "tenant": receipt.tenant, "capability": receipt.capability, "agent_id": receipt.agent_id,
        "instance_id": receipt.instance_id, "status": str(receipt.status), "attempt": receipt.attempt,
        "ts": receipt.at, "error_kind": err.kind if err else None, "error_code": err.code if err else None,
        "error_message": err.message if err else None, "retry_after_ms": receipt.retry_after_ms,
        "result": receipt.result.decode("utf-8", "replace") if receipt.result is not None else None,
        "step_status": str(receipt.step_status) if receipt.step_status else None, "cost": receipt.cost,
        "due_at": receipt.due_at, "timings": receipt.timings,
        "candidates": len(decision.candidates) if decision else None,
        "picked_instance": decision.picked_instance if decision else None, "picked_score": picked,
        "inbox_topic": decision.topic if decision else None,
        "inbox_partition": decision.partition if decision else None,
        "inbox_offset": decision.offset if decision else None,
        "arm": decision.arm if decision else None, "admission": decision.admission if decision else None,
        "callback": receipt.callback, "channel": receipt.channel.channel if receipt.channel else None,
        "provider_message_id": receipt.channel.provider_message_id if receipt.channel else None,
        "callback_id": receipt.channel.callback_id if receipt.channel else None,
        **_usage(receipt),
    }


def _usage(receipt: Receipt) -> dict[str, Any]:
    used = receipt.usage
    if used is None:
        return {}
    app = used.source[len(APP_SOURCE):] if used.source and used.source.startswith(APP_SOURCE) else None
    return {"input_tokens": used.input_tokens, "output_tokens": used.output_tokens, "model": used.model,
            "cost_micros": used.cost_micros, "currency": used.currency, "source": used.source, "app_id": app}


def read_receipts(consumer: Consumer, topic: str, since_ms: int | None, until_ms: int | None,
                  stats: LoadStats, timeout: float = 10.0) -> Iterator[dict[str, Any]]:
    """Receipts whose broker timestamp lies in [since, until), from offsets looked up by timestamp."""
    starts = topicreader.start_offsets(consumer, topic, since_ms, timeout)
    for msg in topicreader.read_range(consumer, topic, starts, until_ms=until_ms, idle_timeout=timeout):
        value = msg.value()
        try:
            row = flatten(codec.decode(value or b"", Receipt))
        except DecodeError:
            stats.undecodable += 1
            continue
        row.update(kafka_partition=msg.partition(), kafka_offset=msg.offset(), kafka_timestamp=msg.timestamp()[1])
        stats.rows += 1
        yield row


def load(rows: Iterator[dict[str, Any]], workdir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the `receipts` view over the rows (via a newline-delimited JSON file)."""
    con = load_table(rows, workdir, table="receipts", columns=COLUMNS)
    con.execute(USAGE_VIEW)
    return con


def load_table(rows: Iterator[dict[str, Any]], workdir: Path, *, table: str,
               columns: dict[str, str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with `table` over flat rows of `columns` (TIMESTAMP columns hold epoch millis)."""
    path = workdir / f"{table}.ndjson"
    with open(path, "w") as out:
        for row in rows:
            out.write(json.dumps(row))
            out.write("\n")
    con = duckdb.connect(":memory:")
    raw_cols = {k: ("BIGINT" if v == "TIMESTAMP" else v) for k, v in columns.items()}
    spec = ", ".join(f"'{k}': '{v}'" for k, v in raw_cols.items())
    select = ", ".join(
        f'epoch_ms("{k}") AS "{k}"' if v == "TIMESTAMP" else f'"{k}"' for k, v in columns.items()
    )
    con.execute(
        f"CREATE TABLE {table} AS SELECT {select} FROM read_json('{path}', format='newline_delimited', "
        f"columns={{{spec}}})"
    )
    return con


def literal(text: str) -> str:
    """`text` as a SQL string literal (quotes doubled): how a path enters DuckDB's SQL."""
    return "'" + text.replace("'", "''") + "'"


def seal(con: duckdb.DuckDBPyConnection, out: Path | None = None) -> None:
    """Before a user's SQL runs: no file or network access from then on (no reads of other files, no COPY elsewhere,
    no extension installs, no ATTACH), only `out` may be written; the settings are locked so that the SQL cannot
    turn them back on (decision 0060). A connection sealed already stays as it is."""
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchone()
    if locked is not None and locked[0] is True:
        return
    if out is not None:
        con.execute(f"SET allowed_paths = [{literal(str(out.absolute()))}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def query(con: duckdb.DuckDBPyConnection, sql: str, *, view: str = "receipts",
          command: str = "reach receipts sql") -> tuple[list[str], list[tuple[Any, ...]]]:
    """The user's `sql` over the loaded view, on a sealed connection (no file or network access)."""
    seal(con)
    try:
        cursor = con.execute(sql)
    except duckdb.Error as exc:
        raise QueryError(f"The query did not run: {exc}. The view is `{view}`; `{command} "
                         f"'DESCRIBE {view}'` lists its columns.") from None
    names = [d[0] for d in cursor.description or []]
    return names, cursor.fetchall()


def export(con: duckdb.DuckDBPyConnection, sql: str, fmt: str, out: Path) -> None:
    """Write the query's result to `out` as csv, json or parquet (DuckDB's COPY), on a connection sealed to all
    files but `out`; the path enters the SQL as a quoted literal."""
    options = {"csv": "FORMAT CSV, HEADER", "json": "FORMAT JSON, ARRAY true", "parquet": "FORMAT PARQUET"}[fmt]
    seal(con, out)
    try:
        con.execute(f"COPY ({sql}) TO {literal(str(out.absolute()))} ({options})")
    except duckdb.Error as exc:
        raise QueryError(f"The query did not run: {exc}") from None


def temp_workdir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="reach-receipts-")
