"""How long Redis keeps a message's first terminal (the agent's result cache, the router's and the timekeeper's
fence), and when a delivery is old enough that the register may be gone (pure).

The register is written when the message ends, at or after its `created_at`, and lives RESULT_TTL_S from then. A
delivery that comes less than RESULT_TTL_S - CLOCK_SLACK_MS after `created_at` therefore finds it, when there is
one; an older delivery (an agent that was down with the record uncommitted, a long budget's late attempt) cannot
tell "never ended" from "forgotten", so the SDK asks the status table (the durable record) before it runs the
handler (docs/decisions/0031-redis-cluster-and-bounded-result-cache.md)."""

from __future__ import annotations

RESULT_TTL_S = 30 * 60
"""Seconds a first terminal (with its result) stays in Redis: at 2,000 req/s that is 3.6 M registers, ~2.2 GiB at
the ~650 bytes per request `reach bench` measures (docs/performance.md)."""

CLOCK_SLACK_MS = 60_000
"""How far the caller's clock (created_at) may run behind the agent's, and a finish after created_at may lag."""


def may_be_forgotten(*, created_at_ms: int, now_ms: int, ttl_s: int) -> bool:
    """Whether a register of this message, written when it ended, may have expired by `now_ms`."""
    return now_ms - created_at_ms >= ttl_s * 1000 - CLOCK_SLACK_MS
