"""Short health settings and call builders for the health unit tests."""

from __future__ import annotations

from typing import Any

from reach.core.breaker import Outcome
from reach.core.healthmodel.calls import Call
from reach.core.healthmodel.settings import HealthSettings

SHORT = HealthSettings(error_window_ms=10_000, open_ms=5_000, eject_window_ms=60_000, eject_hold_ms=2_000,
                       restore_step_ms=3_000, slow_window_ms=1_000, slow_windows=5, slow_ms=4_000,
                       emit_interval_ms=1_000, long_window_ms=300_000, forget_ms=600_000)


def call(at: int, outcome: Outcome = Outcome.SUCCESS, *, instance: str = "i-1", run_ms: int | None = 10,
         capability: str = "demo.echo", timed_out: bool = False) -> Call:
    return Call(instance_id=instance, agent_id="agent://demo/x", capability=capability, at=at, outcome=outcome,
                run_ms=run_ms if outcome is Outcome.SUCCESS else None, timed_out=timed_out)


def receipt(status: str, *, at: int = 1_000, instance: str | None = "i-1", kind: str | None = None,
            code: str = "X", run_ms: int | None = None, **extra: Any) -> dict[str, Any]:
    """A decoded receipt as `codec.decode_dict("Receipt", ...)` yields it."""
    error = {"kind": kind, "code": code, "message": "m"} if kind else None
    return {"message_id": "m", "status": status, "instance_id": instance, "agent_id": "agent://demo/x",
            "capability": "demo.echo", "at": at, "error": error,
            "timings": {"run_ms": run_ms} if run_ms is not None else {}, **extra}
