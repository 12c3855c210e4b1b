"""Session affinity: session_key -> instance_id, in memory with a TTL.

Capability topics are keyed by session_key, so one session always lands on one capability
partition and therefore on one router worker: an in-process table is enough and needs no
coordination. A restarted worker starts empty and re-picks (the session then sticks again); losing
it costs affinity, never a message: state that may live outside Kafka because losing it loses nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from reach.core.turns import PREFER_HEADER


class AffinityTable:
    """Remembers the instance serving each session for `ttl_ms` after its last request."""

    def __init__(self, *, ttl_ms: int = 600_000, max_sessions: int = 200_000) -> None:
        self._ttl_ms = ttl_ms
        self._max = max_sessions
        self._entries: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def get(self, session_key: str | None, now_ms: int) -> str | None:
        if not session_key:
            return None
        entry = self._entries.get(session_key)
        if entry is None:
            return None
        instance_id, seen_at = entry
        if now_ms - seen_at > self._ttl_ms:
            del self._entries[session_key]
            return None
        return instance_id

    def set(self, session_key: str | None, instance_id: str, now_ms: int) -> None:
        if not session_key:
            return
        self._entries[session_key] = (instance_id, now_ms)
        self._entries.move_to_end(session_key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def sticky(table: AffinityTable, session_key: str | None, headers: Mapping[str, str] | None, now_ms: int) -> str | None:
    """The instance a session sticks to: the table's, else the one the envelope names (the next turn of a multi-turn
    message prefers the instance that asked, reach.core.turns.PREFER_HEADER, even on a worker that never saw it)."""
    if not session_key:
        return None
    return table.get(session_key, now_ms) or (headers.get(PREFER_HEADER) if headers else None)
