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
