"""Session affinity: session_key -> instance_id, bounded and expiring with the session's idle time, recovered from
the compacted sessions topic after a restart or a rebalance (reach.core.sessionmap).

Capability topics are keyed by session_key, so one session always lands on one capability partition and therefore
on one router worker, which routes it from this table. Every router also reads the sessions topic (its feed, from
the beginning, then tailing it), so the worker that gets the partition after a restart or a rebalance already knows
where the session sticks. Losing a record costs affinity, never a message.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from reach.core.sessionmap import DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SNAPSHOT_BYTES, DEFAULT_TTL_MS, SessionMap
from reach.core.turns import PREFER_HEADER


class AffinityTable:
    """The routing thread's reads and writes and the feed thread's records, under one lock."""

    def __init__(self, *, ttl_ms: int = DEFAULT_TTL_MS, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES) -> None:
        self._map = SessionMap(ttl_ms=ttl_ms, max_sessions=max_sessions, max_snapshot_bytes=max_snapshot_bytes)
        self._lock = threading.Lock()

    def get(self, session_key: str | None, now_ms: int) -> str | None:
        with self._lock:
            return self._map.get(session_key, now_ms)

    def set(self, session_key: str | None, instance_id: str, now_ms: int) -> bool:
        """True when the sessions topic should get a record of it (reach.core.sessionmap.SessionMap.set)."""
        with self._lock:
            return self._map.set(session_key, instance_id, now_ms)

    def learn(self, session_key: str, instance_id: str, seen_at: int, now_ms: int, *,
              snapshot: str | None = None, snapshot_at: int = 0) -> bool:
        with self._lock:
            return self._map.learn(session_key, instance_id, seen_at, now_ms, snapshot=snapshot,
                                   snapshot_at=snapshot_at)

    def snapshot(self, session_key: str | None, now_ms: int) -> tuple[str | None, int]:
        """The session's snapshot its handlers wrote back, and when ((None, 0): none)."""
        with self._lock:
            return self._map.snapshot(session_key, now_ms)

    def forget(self, session_key: str) -> None:
        with self._lock:
            self._map.forget(session_key)

    def __len__(self) -> int:
        return len(self._map)


def sticky(table: AffinityTable, session_key: str | None, headers: Mapping[str, str] | None, now_ms: int) -> str | None:
    """The instance a session sticks to: the table's, else the one the envelope names (the next turn of a multi-turn
    message prefers the instance that asked, reach.core.turns.PREFER_HEADER, even on a worker that never saw it)."""
    if not session_key:
        return None
    return table.get(session_key, now_ms) or (headers.get(PREFER_HEADER) if headers else None)
