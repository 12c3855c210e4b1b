"""Nonces seen within the replay window: Redis `SET NX EX` shared by every replica, and an in-memory fake."""

from __future__ import annotations

import time
from collections.abc import Callable

from reach.gateway.redisconn import guarded
from reach.redisclient import AsyncRedis


class RedisNonceStore:
    """`claim` is one `SET <ns>:gateway:nonce:<scope>:<nonce> 1 NX EX ttl`: atomic across replicas."""

    def __init__(self, *, client: AsyncRedis, namespace: str) -> None:
        self._client = client
        self._prefix = f"{namespace}:gateway:nonce:"

    async def claim(self, key_id: str, nonce: str, ttl_s: int) -> bool:
        with guarded("claiming a request nonce"):
            return bool(await self._client.set(f"{self._prefix}{key_id}:{nonce}", b"1", nx=True, ex=max(1, ttl_s)))

    async def release(self, key_id: str, nonce: str) -> None:
        with guarded("releasing a request nonce"):
            await self._client.delete(f"{self._prefix}{key_id}:{nonce}")


class MemoryNonceStore:
    """The same rule in one process, for unit tests (and a single gateway without Redis)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[tuple[str, str], float] = {}
        self._prune_at = 1024

    async def claim(self, key_id: str, nonce: str, ttl_s: int) -> bool:
        now = self._clock()
        if len(self._until) >= self._prune_at:  # forget expired nonces; amortised O(1) per claim
            self._until = {k: t for k, t in self._until.items() if t > now}
            self._prune_at = max(1024, 2 * len(self._until))
        if self._until.get((key_id, nonce), 0.0) > now:
            return False
        self._until[(key_id, nonce)] = now + max(1, ttl_s)
        return True

    async def release(self, key_id: str, nonce: str) -> None:
        self._until.pop((key_id, nonce), None)
