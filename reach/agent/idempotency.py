"""Redis leases on (message_id, generation) and caches of what a run produced, so a redelivery never reruns."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis

from reach.headers import Headers
from reach.retry import Outgoing

# One round trip per message: the terminal result, this attempt's cached retry, else the lease (SET NX PX).
_CLAIM = """
local done = redis.call('get', KEYS[2])
if done then return {'result', done} end
local again = redis.call('get', KEYS[3])
if again then return {'retry', again} end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'ours', ''} end
return {'held', redis.call('get', KEYS[1]) or '?'}
"""
# Renewal re-takes a lease that vanished (Redis restarted or was flushed) as long as nobody else took it.
_RENEW = """
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
if not holder then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0 end
return 0
"""
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


@dataclass(frozen=True)
class Claim:
    """What a claim found: a cached terminal receipt, this attempt's cached records, another holder, or ours."""

    result: bytes | None = None
    retry: tuple[Outgoing, ...] | None = None
    holder: str | None = None

    @property
    def ours(self) -> bool:
        return self.result is None and self.retry is None and self.holder is None


class LeaseStore(Protocol):
    """The SDK's view of Redis; every method may raise (RedisError, OSError) when Redis is unreachable."""

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int) -> Claim: ...

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool: ...

    async def release(self, message_id: str, generation: int) -> None: ...

    async def store(self, message_id: str, generation: int, receipt: bytes) -> None: ...

    async def store_retry(self, message_id: str, generation: int, attempt: int,
                          records: tuple[Outgoing, ...]) -> None: ...


class Leases:
    """`<ns>:lease:<id>:<gen>` (owner = instance id), `<ns>:result:<id>:<gen>`, `<ns>:retry:<id>:<gen>:<attempt>`."""

    def __init__(self, redis: Redis, *, namespace: str, owner: str, result_ttl_s: int) -> None:
        self._redis = redis
        self._ns = namespace
        self._owner = owner
        self._result_ttl_s = result_ttl_s
        self._claim = redis.register_script(_CLAIM)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    def lease_key(self, message_id: str, generation: int) -> str:
        return f"{self._ns}:lease:{message_id}:{generation}"

    def result_key(self, message_id: str, generation: int) -> str:
        return f"{self._ns}:result:{message_id}:{generation}"

    def retry_key(self, message_id: str, generation: int, attempt: int) -> str:
        return f"{self._ns}:retry:{message_id}:{generation}:{attempt}"

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int) -> Claim:
        """Check both caches and take the lease, atomically and in one round trip."""
        keys = [self.lease_key(message_id, generation), self.result_key(message_id, generation),
                self.retry_key(message_id, generation, attempt)]
        kind, value = await self._claim(keys=keys, args=[self._owner, str(ttl_ms)])
        if kind == b"result":
            return Claim(result=value)
        if kind == b"retry":
            return Claim(retry=decode_records(value))
        if kind == b"held":
            return Claim(holder=value.decode(errors="replace"))
        return Claim()

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        """Extend our lease (re-taking it if it vanished); False when someone else holds it now."""
        result: Any = await self._renew(keys=[self.lease_key(message_id, generation)], args=[self._owner, str(ttl_ms)])
        return bool(result)

    async def release(self, message_id: str, generation: int) -> None:
        """Drop our lease (only ours), so a retry or another instance may claim it at once."""
        await self._release(keys=[self.lease_key(message_id, generation)], args=[self._owner])

    async def store(self, message_id: str, generation: int, receipt: bytes) -> None:
        """Cache a terminal receipt for `result_ttl_s`; written before the receipt is published."""
        await self._redis.set(self.result_key(message_id, generation), receipt, ex=self._result_ttl_s)

    async def store_retry(self, message_id: str, generation: int, attempt: int,
                          records: tuple[Outgoing, ...]) -> None:
        """Cache what a failed attempt produced (retry or dead letter, and its receipt); written before them."""
        await self._redis.set(self.retry_key(message_id, generation, attempt), encode_records(records),
                              ex=self._result_ttl_s)


def encode_records(records: tuple[Outgoing, ...]) -> bytes:
    """Records as JSON (bytes in base64), for the retry cache."""
    def b64(data: str | bytes | None) -> str | None:
        if isinstance(data, str):
            data = data.encode()
        return None if data is None else base64.b64encode(data).decode()

    return json.dumps([{"topic": r.topic, "key": r.key, "value": b64(r.value),
                        "headers": [[k, b64(v)] for k, v in r.headers]} for r in records]).encode()


def decode_records(data: bytes) -> tuple[Outgoing, ...]:
    """The inverse of `encode_records`."""
    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    out = []
    for item in json.loads(data):
        headers: Headers = [(k, raw(v) or b"") for k, v in item["headers"]]
        out.append(Outgoing(topic=item["topic"], key=item["key"], value=raw(item["value"]), headers=headers))
    return tuple(out)
