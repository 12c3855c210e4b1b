"""Conditional handoff moves: a claim per (message_id, opened at, version) in Redis, so that of two operators moving the
same handoff at once exactly one writes and the other is told (HandoffConflict: CLI exit 2, console 409).

The handoff record on the compacted topic stays the truth; the claim only decides who may write the next
version. A claim expires after CLAIM_TTL_S and is released when the move fails, so a crash between claim
and write blocks that handoff for at most that long. Losing Redis loses no message: a move is refused
(InfraUnavailable, exit 4) until it answers.
"""

from __future__ import annotations

from typing import Protocol

import redis

from reach.errors import InfraUnavailable
from reach.redisclient import sync_client

CLAIM_TTL_S = 120  # longer than a move's writes take (each waits at most 15 s for the broker)


class Claims(Protocol):
    """Set-if-absent claims: Redis, or a test's in-memory fake."""

    def claim(self, key: str, owner: str, ttl_s: int) -> bool: ...

    def release(self, key: str, owner: str) -> None: ...


class MemoryClaims:
    """In-memory claims for unit tests (no expiry)."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}

    def claim(self, key: str, owner: str, ttl_s: int) -> bool:
        if key in self.held:
            return False
        self.held[key] = owner
        return True

    def release(self, key: str, owner: str) -> None:
        if self.held.get(key) == owner:
            del self.held[key]


class RedisClaims:
    """Claims as `SET key owner NX EX ttl` on the namespace's Redis (REACH_REDIS_URL)."""

    def __init__(self, url: str) -> None:
        self._client = sync_client(url, socket_timeout=2, socket_connect_timeout=2)

    def claim(self, key: str, owner: str, ttl_s: int) -> bool:
        try:
            return bool(self._client.set(key, owner, nx=True, ex=ttl_s))
        except (redis.RedisError, OSError) as exc:
            raise InfraUnavailable(f"Redis did not answer while claiming handoff move {key} ({exc}); the handoff "
                                   "was not moved. Check REACH_REDIS_URL and run the command again.") from None

    def release(self, key: str, owner: str) -> None:
        try:
            if self._client.get(key) == owner.encode():
                self._client.delete(key)
        except (redis.RedisError, OSError):
            pass  # the claim expires by itself after CLAIM_TTL_S


def claim_key(namespace: str, message_id: str, opened_at: int, version: int) -> str:
    """One key per move of one handoff: `opened_at` tells apart a handoff written again for the same message
    (a re-route that ended in a handoff once more starts at version 0 again)."""
    return f"{namespace}:handoff-move:{message_id}:{opened_at}:{version}"
