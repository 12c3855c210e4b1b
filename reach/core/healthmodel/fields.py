"""The health fields operators see, in one list: `GET /agents`, `reach agents --json` and the docs derive from it."""

from __future__ import annotations

from typing import Any

from reach.records import InstanceHealth

SHOWN: tuple[str, ...] = (
    "breaker", "open_until", "admit", "weight", "timeout_factor", "reason", "calls_1m", "success_1m", "calls_5m",
    "success_5m", "p50_ms", "p95_ms", "slow_ratio", "overloads_10s", "consecutive_failures",
)
"""The router-facing InstanceHealth fields, in display order."""

BREAKER_VALUE = {"CLOSED": 0, "HALF_OPEN": 1, "OPEN": 2, "UNKNOWN": 0}
"""The breaker state as a gauge value (UNKNOWN reads as CLOSED, as routers read it)."""


def health_fields(record: InstanceHealth | None) -> dict[str, Any]:
    """The shown fields of an instance's record; an instance without one is healthy by default (CLOSED)."""
    if record is None:
        return {"breaker": "CLOSED", "health_at": None, **{f: None for f in SHOWN if f != "breaker"},
                "admit": 1.0, "weight": 1.0, "timeout_factor": 1.0}
    data = record.model_dump(include=set(SHOWN))
    data["breaker"] = record.breaker.value
    return {"health_at": record.at, **{f: data[f] for f in SHOWN}}


_BREAKER_COLOUR = {"CLOSED": "green", "HALF_OPEN": "yellow", "OPEN": "red"}


def breaker(info: dict[str, Any]) -> str:
    """A row's breaker for a rich table: its state in colour, the admitted share while restoring (`CLOSED 50%`),
    `w0` while weight 0."""
    state = info.get("breaker")
    if not isinstance(state, str):
        return "-"
    admit = info.get("admit")
    restoring = f" {admit:.0%}" if state == "CLOSED" and isinstance(admit, (int, float)) and admit < 1 else ""
    weight = " w0" if info.get("weight") == 0 else ""
    return f"[{_BREAKER_COLOUR.get(state, 'white')}]{state}[/]{restoring}{weight}"


def share(value: object) -> str:
    """0.953 -> `95%`; `-` without calls."""
    return f"{value:.0%}" if isinstance(value, (int, float)) else "-"
