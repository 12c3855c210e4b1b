"""The overview's numbers (pure over DuckDB): per capability over a window of receipts (outcomes, latency, usage),
and a series per bucket.

The SQL runs over reach.analytics' `receipts` view, the one `reach receipts sql` queries, so an operator
can check any number on the page with the CLI for the same --since/--until (docs/console.md lists the
queries). A message counts in the window when its terminal receipt does; created -> terminal is
measured from the first receipt of its generation in the window (ACCEPTED when the gateway or a redrive
took it, else the router's first ROUTED or UNROUTABLE; a client publishing straight to Kafka writes none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from reach.records import TERMINAL

_TERMINAL_SQL = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL))

PER_CAPABILITY = f"""
WITH terminal AS (
  SELECT message_id, generation, capability, status, attempt, error_kind, ts FROM receipts
  WHERE status IN ({_TERMINAL_SQL})
), first AS (
  SELECT message_id, generation, min(ts) AS ts FROM receipts GROUP BY ALL
)
SELECT t.capability,
  count(*) AS terminal,
  count(*) FILTER (WHERE t.status = 'COMPLETED') AS completed,
  count(*) FILTER (WHERE t.status = 'COMPLETED' AND t.attempt <= 1) AS first_attempt,
  count(*) FILTER (WHERE t.attempt > 1) AS retried,
  count(*) FILTER (WHERE t.error_kind = 'OVERLOAD') AS overload,
  quantile_cont(epoch_ms(t.ts) - epoch_ms(a.ts), 0.5) AS p50_ms,
  quantile_cont(epoch_ms(t.ts) - epoch_ms(a.ts), 0.99) AS p99_ms
FROM terminal t LEFT JOIN first a USING (message_id, generation)
GROUP BY t.capability ORDER BY t.capability
"""

SERIES = f"""
SELECT capability, (epoch_ms(ts) // $bucket) * $bucket AS bucket,
  count(*) AS terminal, count(*) FILTER (WHERE status = 'COMPLETED') AS completed
FROM receipts WHERE status IN ({_TERMINAL_SQL}) GROUP BY ALL ORDER BY capability, bucket
"""


# over reach.analytics' `usage` view: each request generation's terminal receipt that reported usage (ctx.usage)
USAGE = """
SELECT capability, count(*) AS requests, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
  sum(cost) AS cost, count(*) FILTER (WHERE status = 'COMPLETED') AS completed, any_value(currency) AS currency
FROM usage GROUP BY capability ORDER BY capability
"""


@dataclass(frozen=True, slots=True)
class CapabilityUsage:
    """What one capability's requests reported they cost in the window (docs/analytics.md, the `usage` view)."""

    capability: str
    requests: int
    input_tokens: int
    output_tokens: int
    cost: float | None  # units of `currency`; None when no request reported a cost
    completed: int
    currency: str | None

    def as_dict(self) -> dict[str, Any]:
        per_success = self.cost / self.completed if self.cost is not None and self.completed else None
        return {"capability": self.capability, "requests": self.requests, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cost": self.cost, "currency": self.currency,
                "cost_per_success": per_success}


def usage(con: duckdb.DuckDBPyConnection) -> list[CapabilityUsage]:
    return [CapabilityUsage(capability=str(r[0]), requests=int(r[1]), input_tokens=int(r[2] or 0),
                            output_tokens=int(r[3] or 0), cost=None if r[4] is None else float(r[4]),
                            completed=int(r[5]), currency=r[6]) for r in con.execute(USAGE).fetchall()]


@dataclass(frozen=True, slots=True)
class CapabilityStats:
    """One capability's row of the overview."""

    capability: str
    terminal: int
    completed: int
    first_attempt: int
    retried: int
    overload: int
    p50_ms: float | None
    p99_ms: float | None
    throughput: float  # terminal messages per second over the window

    @property
    def success(self) -> float | None:
        return self.completed / self.terminal if self.terminal else None

    def as_dict(self) -> dict[str, Any]:
        def share(n: int) -> float | None:
            return n / self.terminal if self.terminal else None

        return {"capability": self.capability, "terminal": self.terminal, "completed": self.completed,
                "first_attempt": self.first_attempt, "retried": self.retried, "overload": self.overload,
                "success_rate": self.success, "first_attempt_success": share(self.first_attempt),
                "retry_rate": share(self.retried), "overload_rate": share(self.overload),
                "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "throughput_per_s": self.throughput}


def per_capability(con: duckdb.DuckDBPyConnection, window_ms: int) -> list[CapabilityStats]:
    rows = con.execute(PER_CAPABILITY).fetchall()
    seconds = max(window_ms, 1) / 1000
    return [CapabilityStats(capability=str(r[0]), terminal=int(r[1]), completed=int(r[2]), first_attempt=int(r[3]),
                            retried=int(r[4]), overload=int(r[5]),
                            p50_ms=None if r[6] is None else float(r[6]), p99_ms=None if r[7] is None else float(r[7]),
                            throughput=int(r[1]) / seconds) for r in rows]


def series(con: duckdb.DuckDBPyConnection, bucket_ms: int) -> dict[str, list[tuple[int, int, int]]]:
    """(bucket start ms, terminal, completed) per capability, buckets without traffic left out."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for capability, bucket, terminal, completed in con.execute(SERIES, {"bucket": bucket_ms}).fetchall():
        out.setdefault(str(capability), []).append((int(bucket), int(terminal), int(completed)))
    return out


def sparkline(points: list[tuple[int, int, int]], *, since_ms: int, until_ms: int, bucket_ms: int,
              width: int = 240, height: int = 40) -> str:
    """An inline SVG of terminal (grey) and completed (green) per bucket across the window; no JavaScript."""
    buckets = max(1, -(-(until_ms - since_ms) // bucket_ms))
    by_bucket = {b: (t, c) for b, t, c in points}
    start = since_ms // bucket_ms * bucket_ms
    values = [by_bucket.get(start + i * bucket_ms, (0, 0)) for i in range(buckets)]
    top = max([t for t, _ in values] + [1])
    step = width / max(buckets - 1, 1)

    def line(index: int, colour: str) -> str:
        coords = " ".join(f"{i * step:.1f},{height - 2 - (v[index] / top) * (height - 4):.1f}"
                          for i, v in enumerate(values))
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'

    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="terminal and completed per {bucket_ms // 1000} s">{line(0, "#888")}{line(1, "#2a7")}</svg>')
