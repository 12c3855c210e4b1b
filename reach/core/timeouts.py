"""How long one run may take: the agent's declared execution timeout, what the caller asked, the operator's
POLICY cap, and the heartbeat timeout of handlers that call `ctx.heartbeat()` (decision 0029). Pure.

effective = min(declared by the agent, asked by the caller if set, POLICY cap if set); 0 means "not set" for
the caller's ask and the cap. The agent SDK enforces it; the router's slow-instance stretch
(`stretched`) applies to what the caller asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from reach.errors import ConfigError

DEFAULT_EXECUTION_TIMEOUT_MS = 30_000  # declared by Agent() unless it says otherwise: one LLM call, P95 18 s
DEFAULT_HEARTBEAT_TIMEOUT_MS = 30_000  # a heartbeating handler must beat at least this often
DEFAULT_DELIVERY_TIMEOUT_MS = 5_000     # ROUTED -> STARTED: a healthy instance picks up work within a poll or two
DEFAULT_BUDGET_MS = 45_000              # created_at -> deadline: room for ~4 attempts with backoff
MAX_TIMEOUT_MS = 3_600_000             # above an hour a run is a workflow, not a request: refused as absurd
NOT_SET = 0


class BadTimeout(ConfigError, ValueError):
    """A timeout that is negative, not an integer, or absurdly long."""


def check_timeout_ms(value: object, *, what: str, optional: bool = False) -> int:
    """`value` as a timeout in ms, or BadTimeout saying what was expected. `optional`: 0 (not set) is allowed."""
    low = NOT_SET if optional else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TIMEOUT_MS:
        unset = " or 0 (not set)" if optional else ""
        raise BadTimeout(f"{what} must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS:,} (1 h){unset}; "
                         f"got {value!r}. Longer work should heartbeat (ctx.heartbeat()) or be split into steps.")
    return value


def timeout_problem(value: int, *, what: str) -> str | None:
    """Why an optional timeout read from a record is unusable (negative or absurd), or None."""
    try:
        check_timeout_ms(value, what=what, optional=True)
    except BadTimeout as exc:
        return str(exc)
    return None


def effective_execution_timeout_ms(declared_ms: int, asked_ms: int = NOT_SET, cap_ms: int | None = None) -> int:
    """The run's timeout: the agent's declared one, shortened by the caller's ask and by the POLICY cap when they
    are set (> 0). An agent that declares none (an old registration: 0) gets the default."""
    declared = declared_ms if declared_ms > 0 else DEFAULT_EXECUTION_TIMEOUT_MS
    return min([declared, *(v for v in (asked_ms, cap_ms) if v is not None and v > 0)])


def stretched(asked_ms: int, factor: float) -> int:
    """The caller's ask multiplied for a slow sole candidate; an ask that is not set stays not set (the agent's
    declared timeout then applies, unstretched)."""
    if asked_ms <= 0 or factor <= 1:
        return asked_ms
    return min(int(asked_ms * factor), MAX_TIMEOUT_MS)


@dataclass(frozen=True)
class RunClock:
    """When one run is due to be cut. Until the handler's first heartbeat: started + timeout. After a heartbeat
    at t: t + heartbeat timeout (a handler that goes quiet is cut, also before its execution timeout; one that
    keeps beating runs past it), never past `limit_at` (the POLICY cap, else the message's deadline)."""

    started_ms: int
    timeout_ms: int
    heartbeat_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    limit_at: int | None = None
    beat_at: int | None = None

    @classmethod
    def start(cls, *, started_ms: int, timeout_ms: int, heartbeat_ms: int, cap_ms: int | None,
              deadline: int | None) -> RunClock:
        """A run's clock; heartbeats extend it up to the POLICY cap when set, else up to the message's deadline."""
        limit: int | None = None
        if cap_ms is not None and cap_ms > 0:
            limit = started_ms + cap_ms
        elif deadline is not None:
            limit = max(started_ms + timeout_ms, deadline)
        return cls(started_ms=started_ms, timeout_ms=timeout_ms, heartbeat_ms=heartbeat_ms, limit_at=limit)

    @property
    def due_at(self) -> int:
        due = self.started_ms + self.timeout_ms if self.beat_at is None else self.beat_at + self.heartbeat_ms
        return due if self.limit_at is None else min(due, self.limit_at)

    @property
    def by_heartbeat(self) -> bool:
        """True when the deadline in force comes from a heartbeat (the cut is a heartbeat timeout)."""
        return self.beat_at is not None

    def beat(self, now_ms: int) -> RunClock:
        return RunClock(started_ms=self.started_ms, timeout_ms=self.timeout_ms, heartbeat_ms=self.heartbeat_ms,
                        limit_at=self.limit_at, beat_at=now_ms)
