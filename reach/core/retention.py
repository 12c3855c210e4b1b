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


def began_after(*, created_at_ms: int, memory_since_ms: int | None) -> bool:
    """Whether Redis's memory began after this message was created (Redis came back empty, or this namespace is
    new): its register may be gone however young the message is, so the status table is asked
    (docs/decisions/0041-idempotency-and-sessions-from-kafka.md)."""
    return memory_since_ms is not None and created_at_ms < memory_since_ms


def key_may_be_forgotten(*, now_ms: int, window_ms: int, memory_since_ms: int | None) -> bool:
    """Whether a business key's COMPLETED result, kept `window_ms`, may predate Redis's memory: for one window
    after Redis came back empty the key ledger on Kafka is asked too."""
    return memory_since_ms is not None and now_ms - memory_since_ms < window_ms + CLOCK_SLACK_MS
