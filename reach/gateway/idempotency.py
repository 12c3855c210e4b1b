"""app + idempotency_key -> the first request's ids, in Redis for the idempotency window (every replica sees it)."""

from __future__ import annotations

import hashlib
import json

from reach.gateway.deps import Remembered
from reach.gateway.redisconn import guarded
from reach.redisclient import AsyncRedis


def idem_key(namespace: str, app_id: str, key: str) -> str:
    """The Redis key; the caller's key is hashed so its length and bytes never shape ours."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{namespace}:gateway:idem:{app_id}:{digest}"


def _dump(ids: Remembered) -> str:
    return json.dumps({"state": ids.state, "message_id": ids.message_id, "trace_id": ids.trace_id,
                       "fingerprint": ids.fingerprint})


def _load(raw: bytes | str) -> Remembered:
    data = json.loads(raw)
    return Remembered(state=data["state"], message_id=data["message_id"], trace_id=data["trace_id"],
                      fingerprint=data.get("fingerprint", ""))


class RedisIdempotency:
    """SET NX claims a key while its envelope is being acknowledged; SET XX marks it accepted; DEL frees it."""

    def __init__(self, redis: AsyncRedis, namespace: str) -> None:
        self._redis = redis
        self._ns = namespace

    async def claim(self, app_id: str, key: str, ids: Remembered, ttl_s: int) -> Remembered | None:
        name = idem_key(self._ns, app_id, key)
        with guarded("claiming an idempotency key"):
            for _ in range(3):  # a key that expires between SET NX and GET is claimed again
                if await self._redis.set(name, _dump(ids), nx=True, ex=ttl_s):
                    return None
                raw = await self._redis.get(name)
                if raw is not None:
                    return _load(raw)
        return None

    async def accepted(self, app_id: str, key: str, ids: Remembered, ttl_s: int) -> None:
        with guarded("recording an accepted idempotency key"):
            await self._redis.set(idem_key(self._ns, app_id, key), _dump(ids), xx=True, ex=ttl_s)

    async def release(self, app_id: str, key: str) -> None:
        with guarded("releasing an idempotency key"):
            await self._redis.delete(idem_key(self._ns, app_id, key))

    async def aclose(self) -> None:
        await self._redis.aclose()
