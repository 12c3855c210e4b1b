"""Redis leases on (message_id, generation) and a cache of terminal receipts, so a redelivery never reruns."""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis

_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class Leases:
    """`<ns>:lease:<id>:<gen>` (SET NX PX, owner = instance id) and `<ns>:result:<id>:<gen>` (a receipt)."""

    def __init__(self, redis: Redis, *, namespace: str, owner: str, result_ttl_s: int) -> None:
        self._redis = redis
        self._ns = namespace
        self._owner = owner
        self._result_ttl_s = result_ttl_s

    def lease_key(self, message_id: str, generation: int) -> str:
        return f"{self._ns}:lease:{message_id}:{generation}"

    def result_key(self, message_id: str, generation: int) -> str:
        return f"{self._ns}:result:{message_id}:{generation}"

    async def cached(self, message_id: str, generation: int) -> bytes | None:
        """The encoded terminal receipt of an earlier run, if one finished."""
        return cast(bytes | None, await self._redis.get(self.result_key(message_id, generation)))

    async def claim(self, message_id: str, generation: int, ttl_ms: int) -> str | None:
        """Take the lease; returns None on success, else the current holder's instance id."""
        key = self.lease_key(message_id, generation)
        if await self._redis.set(key, self._owner, nx=True, px=ttl_ms):
            return None
        holder = await self._redis.get(key)
        if holder is None:  # it lapsed between the two calls; try once more
            return None if await self._redis.set(key, self._owner, nx=True, px=ttl_ms) else "?"
        return cast(bytes, holder).decode(errors="replace")

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        """Extend our lease; False when it is no longer ours (it lapsed and someone else took it)."""
        result: Any = await self._redis.eval(  # type: ignore[misc]
            _RENEW, 1, self.lease_key(message_id, generation), self._owner, str(ttl_ms))
        return bool(result)

    async def release(self, message_id: str, generation: int) -> None:
        """Drop our lease (only ours), so a retry or another instance may claim it at once."""
        await self._redis.eval(  # type: ignore[misc]
            _RELEASE, 1, self.lease_key(message_id, generation), self._owner)

    async def store(self, message_id: str, generation: int, receipt: bytes) -> None:
        """Cache a terminal receipt for `result_ttl_s`; written before the receipt is published."""
        await self._redis.set(self.result_key(message_id, generation), receipt, ex=self._result_ttl_s)
