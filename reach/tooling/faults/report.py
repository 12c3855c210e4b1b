"""The results of `reach faults run --json` as the Markdown table docs/reliability.md carries (one column list)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TABLE_COLUMNS = ("sent", "acked", "terminal", "lost", "double_side_effects", "double_terminal", "late_terminal",
                 "in_flight", "fault_s", "recovery_s", "drained_s", "p99_ms", "p99_during_ms", "p99_after_ms",
                 "restarts")
"""The figures `reach faults run` tabulates and docs/reliability.md reports, in this order."""


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def verdict_text(row: dict[str, Any]) -> str:
    return "ok" if row.get("ok") else "; ".join(row.get("misses", [])) or "missed"


def outcomes_text(row: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(row.get("outcomes", {}).items()))


def markdown(rows: Iterable[dict[str, Any]]) -> str:
    """One row per scenario: the figures, the first terminal outcomes, the verdict."""
    header = ("scenario", *TABLE_COLUMNS, "outcomes", "verdict")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["scenario"], *(cell(row.get(c)) for c in TABLE_COLUMNS), outcomes_text(row), verdict_text(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
