"""Quotas at the door: a token bucket per app and one per capability, taken together or not at all.

RedisQuotas runs both buckets in one Lua script on Redis's clock (TIME), so every gateway replica shares
them and no two replicas' clocks need to agree; MemoryQuotas is the same rule on reach.core.tokenbucket for one
process (unit tests).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from reach.callers import CallerApp
from reach.core.tokenbucket import TokenBucket
from reach.gateway.ports import QuotaDecision
from reach.gateway.redisconn import guarded
from reach.redisbatch import ScriptBatcher
from reach.redisclient import AsyncRedis, tag

ALLOWED = QuotaDecision(allowed=True)


@dataclass(frozen=True, slots=True)
class Limit:
    """A token bucket's shape: `rate` tokens per second, at most `burst` held."""

    rate: float
    burst: int


LimitOf = Callable[[str], Limit | None]
"""The cap on one capability across every app, or None (GatewaySettings.capability_limit)."""


def _no_cap(_capability: str) -> Limit | None:
    return None


# KEYS[1] the app's bucket, KEYS[2] the capability's; ARGV rate and burst of each (cap rate 0: no cap), and
# ARGV[5] the tokens the app's bucket gives (default 1; a read of many rows costs more). A bucket is a hash
# {tokens, stamp}; a missing one is full. Neither bucket is spent unless both have enough. Returns {allowed,
# scope (1 app, 2 capability, 0 none), retry-after in microseconds}.
TAKE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function fill(key, rate, burst)
  local v = redis.call('HMGET', key, 'tokens', 'stamp')
  local tokens, stamp = tonumber(v[1]), tonumber(v[2])
  if tokens == nil or stamp == nil then return burst end
  if now > stamp then tokens = tokens + (now - stamp) * rate end
  return math.min(burst, tokens)
end
local function wait(tokens, rate, need) return math.ceil((need - tokens) / rate * 1000000) end
local function save(key, tokens, rate, burst)
  redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'stamp', string.format('%.6f', now))
  redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000) + 1000)
end
local app_rate, app_burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local cap_rate, cap_burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local cost = math.min(tonumber(ARGV[5] or '1') or 1, app_burst)
local app = fill(KEYS[1], app_rate, app_burst)
local cap = 1
if cap_rate > 0 then cap = fill(KEYS[2], cap_rate, cap_burst) end
if app < cost then
  local w = wait(app, app_rate, cost)
  if cap < 1 then w = math.max(w, wait(cap, cap_rate, 1)) end
  return {0, 1, w}
end
if cap < 1 then return {0, 2, wait(cap, cap_rate, 1)} end
save(KEYS[1], app - cost, app_rate, app_burst)
if cap_rate > 0 then save(KEYS[2], cap - 1, cap_rate, cap_burst) end
return {1, 0, 0}
"""

_SCOPES: dict[int, Literal["app", "capability"]] = {1: "app", 2: "capability"}


DEFAULT_READ = Limit(rate=50.0, burst=100)  # per app: REACH_GATEWAY_READ_RATE / REACH_GATEWAY_READ_BURST


class RedisQuotas:
    """Buckets `{<ns>:gateway:quota}:app:<app_id>`, `{<ns>:gateway:quota}:cap:<capability>` and
    `{<ns>:gateway:quota}:read:<app_id>`, shared by replicas.

    One hash tag for all of a namespace's buckets: the script takes an app's and a capability's bucket together or
    not at all, so on a Redis Cluster they must share a slot, and any app meets any capability. A namespace's
    quotas are then one node's work (one script call per request, batched per loop turn: far below what a node
    answers); namespaces spread over the nodes (docs/decisions/0031-redis-cluster-and-bounded-result-cache.md)."""

    def __init__(self, *, client: AsyncRedis, namespace: str, capability_limit: LimitOf = _no_cap,
                 read_limit: Limit = DEFAULT_READ) -> None:
        self._prefix = tag(f"{namespace}:gateway:quota") + ":"
        self._limit_of = capability_limit
        self._read = read_limit
        self._take = ScriptBatcher.on(client).script(TAKE_LUA)  # one pipeline per turn of the event loop

    def read_keys(self, app_id: str) -> list[str]:
        """The KEYS of a read take: the app's read bucket, and a second bucket that is off (rate 0)."""
        return [f"{self._prefix}read:{app_id}", f"{self._prefix}read:-"]

    def take_keys(self, app_id: str, capability: str) -> list[str]:
        """The KEYS of a request take: the app's bucket and the capability's (one slot: one hash tag)."""
        return [f"{self._prefix}app:{app_id}", f"{self._prefix}cap:{capability}"]

    async def take_read(self, app: CallerApp, cost: int = 1) -> QuotaDecision:
        keys = self.read_keys(app.app_id)
        with guarded("taking a read quota token"):
            reply: Any = await self._take(keys, [repr(self._read.rate), self._read.burst, "0.0", 0, max(1, cost)])
        allowed, _scope, wait_us = (int(x) for x in reply)
        return ALLOWED if allowed else QuotaDecision(allowed=False, retry_after_s=wait_us / 1e6, scope="read")

    async def take(self, app: CallerApp, capability: str) -> QuotaDecision:
        cap = self._limit_of(capability) or Limit(rate=0.0, burst=0)
        keys = self.take_keys(app.app_id, capability)
        with guarded("taking a quota token"):
            reply: Any = await self._take(keys, [repr(app.rate), app.burst, repr(cap.rate), cap.burst])
        allowed, scope, wait_us = (int(x) for x in reply)
        if allowed:
            return ALLOWED
        return QuotaDecision(allowed=False, retry_after_s=wait_us / 1e6, scope=_SCOPES[scope])


class MemoryQuotas:
    """The same buckets in one process, on reach.core.tokenbucket; a changed app quota reshapes its bucket."""

    def __init__(self, *, capability_limit: LimitOf = _no_cap, clock: Callable[[], float] = time.monotonic,
                 read_limit: Limit = DEFAULT_READ) -> None:
        self._limit_of = capability_limit
        self._clock = clock
        self._read = read_limit
        self._apps: dict[str, TokenBucket] = {}
        self._caps: dict[str, TokenBucket] = {}
        self._reads: dict[str, TokenBucket] = {}

    async def take_read(self, app: CallerApp, cost: int = 1) -> QuotaDecision:
        now = self._clock()
        bucket = self._bucket(self._reads, app.app_id, self._read)
        need = float(min(max(1, cost), self._read.burst))
        wait = bucket.peek(now, need)
        if wait > 0:
            return QuotaDecision(allowed=False, retry_after_s=wait, scope="read")
        bucket.take(now, need)
        return ALLOWED

    @staticmethod
    def _bucket(buckets: dict[str, TokenBucket], key: str, limit: Limit) -> TokenBucket:
        bucket = buckets.get(key)
        if bucket is None or (bucket.rate, bucket.burst) != (limit.rate, limit.burst):
            tokens = -1.0 if bucket is None else min(bucket.tokens, float(limit.burst))
            bucket = buckets[key] = TokenBucket(rate=limit.rate, burst=limit.burst, tokens=tokens,
                                                stamp=-1.0 if bucket is None else bucket.stamp)
        return bucket

    async def take(self, app: CallerApp, capability: str) -> QuotaDecision:
        now = self._clock()
        app_bucket = self._bucket(self._apps, app.app_id, Limit(rate=app.rate, burst=app.burst))
        limit = self._limit_of(capability)
        cap_bucket = self._bucket(self._caps, capability, limit) if limit is not None else None
        app_wait = app_bucket.peek(now)
        cap_wait = cap_bucket.peek(now) if cap_bucket is not None else 0.0
        if app_wait > 0:
            return QuotaDecision(allowed=False, retry_after_s=max(app_wait, cap_wait), scope="app")
        if cap_wait > 0:
            return QuotaDecision(allowed=False, retry_after_s=cap_wait, scope="capability")
        app_bucket.take(now)
        if cap_bucket is not None:
            cap_bucket.take(now)
        return ALLOWED


def retry_after_header(decision: QuotaDecision) -> str:
    """The `Retry-After` value for a refused take: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(decision.retry_after_s)))
