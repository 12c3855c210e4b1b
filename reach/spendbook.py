"""What each app and tenant spent per day and month, in Redis: the usage counter writes it, the gateway and the
router read it.

A charge is one terminal receipt's usage for one scope (`app:<app_id>` or `tenant:<tenant>`). Recording it is one
Lua script per scope: `SET <seen> NX` on (message_id, generation), and only when that set took, HINCRBY of the
day's and the month's counters of the period the receipt's `at` falls in. A receipt read twice (a worker restarted
before its commit, the agent republishing its cached terminal) is therefore counted once. Every key of one scope
carries the scope as its hash tag (`{app:<id>}`), so the script's keys share a Redis Cluster slot.

Keys: `<ns>:spend:{<scope>}:day:<YYYYMMDD>` and `...:month:<YYYYMM>` (hashes `tokens`, `cost`), kept a period past
their end; `<ns>:spend:{<scope>}:seen:<message_id>:<generation>`, kept `SEEN_TTL_S`, twice as long as the agent's
result cache may republish a terminal (reach.core.retention) and far longer than a counter's restart re-reads what
it had not committed (a counter down longer than that with counted, uncommitted receipts would count its last batch
again). Redis is a cache that may be lost: losing it forgets the counts of the running periods (the limits start
again from zero), never a message (docs/decisions/0035-usage-and-spend-limits.md).
MemorySpendBook is the same rule in one process (unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from reach.core.retention import RESULT_TTL_S
from reach.core.spend import Period, Spent, bucket
from reach.errors import InfraUnavailable
from reach.redisclient import AsyncRedis, SyncRedis, sync_client, tag

SEEN_TTL_S = 2 * RESULT_TTL_S  # an hour: past any republish of a cached terminal (reach.core.retention)
_KEEP_S = {Period.DAY: 2 * 24 * 3600, Period.MONTH: 62 * 24 * 3600}  # a period past its end, for reads near it

# KEYS[1] the seen guard, KEYS[2] the day's counter, KEYS[3] the month's; ARGV tokens, cost, seen ttl, day ttl,
# month ttl (seconds). Returns 1 when counted, 0 when this (message, generation) was counted before.
RECORD_LUA = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', tonumber(ARGV[3])) then return 0 end
for i = 2, 3 do
  redis.call('HINCRBY', KEYS[i], 'tokens', tonumber(ARGV[1]))
  redis.call('HINCRBY', KEYS[i], 'cost', tonumber(ARGV[2]))
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[i + 2]))
end
return 1
"""


def app_scope(app_id: str) -> str:
    return f"app:{app_id}"


def tenant_scope(tenant: str) -> str:
    return f"tenant:{tenant}"


def counter_key(namespace: str, scope: str, period: Period, at_ms: int) -> str:
    return f"{namespace}:spend:{tag(scope)}:{period.value}:{bucket(period, at_ms)}"


def seen_key(namespace: str, scope: str, message_id: str, generation: int) -> str:
    return f"{namespace}:spend:{tag(scope)}:seen:{message_id}:{generation}"


@dataclass(frozen=True, slots=True)
class Charge:
    """One terminal receipt's usage for one scope."""

    scope: str
    message_id: str
    generation: int
    at_ms: int
    tokens: int
    cost_micros: int


class RedisSpendBook:
    """The counter's writes (sync: it runs on a worker thread) over one Redis client."""

    def __init__(self, client: SyncRedis, *, namespace: str) -> None:
        self._redis = client
        self._ns = namespace
        self._script = client.register_script(RECORD_LUA)
        self._cluster = not isinstance(client, redis.Redis)  # redis-py's cluster pipeline refuses EVALSHA

    @classmethod
    def from_url(cls, url: str, *, namespace: str) -> RedisSpendBook:
        """Over REACH_REDIS_URL: one node, or a Redis Cluster (`redis+cluster://`, reach.redisclient)."""
        return cls(sync_client(url, socket_timeout=5, socket_connect_timeout=5), namespace=namespace)

    def record(self, charges: Sequence[Charge]) -> int:
        """Count each charge once (one pipeline on one node; one call per charge on a cluster, each on its scope's
        slot); how many were new. InfraUnavailable when Redis does not answer."""
        if not charges:
            return 0
        calls = [([seen_key(self._ns, c.scope, c.message_id, c.generation),
                   counter_key(self._ns, c.scope, Period.DAY, c.at_ms),
                   counter_key(self._ns, c.scope, Period.MONTH, c.at_ms)],
                  [c.tokens, c.cost_micros, SEEN_TTL_S, _KEEP_S[Period.DAY], _KEEP_S[Period.MONTH]])
                 for c in charges]
        try:
            if self._cluster:
                done: list[Any] = [self._script(keys=keys, args=args) for keys, args in calls]
            else:
                pipe = self._redis.pipeline(transaction=False)
                for keys, args in calls:
                    self._script(keys=keys, args=args, client=pipe)
                done = pipe.execute()
        except redis.RedisError as exc:
            raise InfraUnavailable(f"usage: Redis did not count {len(charges)} charge(s): {exc}") from exc
        return sum(int(d) for d in done)

    def spent(self, scope: str, periods: Sequence[Period], now_ms: int) -> dict[Period, Spent]:
        """A scope's counts in the periods asked (the router's reads, on its thread); InfraUnavailable."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            for period in periods:
                pipe.hmget(counter_key(self._ns, scope, period, now_ms), "tokens", "cost")
            found: list[list[Any]] = pipe.execute()
        except redis.RedisError as exc:
            raise InfraUnavailable(f"spend limits: Redis did not answer: {exc}") from exc
        return _counts(periods, found)

    def close(self) -> None:
        self._redis.close()


class RedisSpendReader:
    """The gateway's reads (asyncio): a scope's counts in the periods asked, one pipelined round trip."""

    def __init__(self, client: AsyncRedis, *, namespace: str) -> None:
        self._redis = client
        self._ns = namespace

    async def spent(self, scope: str, periods: Sequence[Period], now_ms: int) -> dict[Period, Spent]:
        if not periods:
            return {}
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for period in periods:
                    pipe.hmget(counter_key(self._ns, scope, period, now_ms), "tokens", "cost")
                found: list[list[Any]] = await pipe.execute()
        except (redis.RedisError, OSError) as exc:
            raise InfraUnavailable(f"spend limits: Redis did not answer: {exc}") from exc
        return _counts(periods, found)


def _counts(periods: Sequence[Period], found: list[list[Any]]) -> dict[Period, Spent]:
    return {period: Spent(tokens=int(v[0] or 0), cost_micros=int(v[1] or 0))
            for period, v in zip(periods, found, strict=True)}


class MemorySpendBook:
    """Both sides in one process, the same rule (unit tests and the in-memory bus)."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str, int]] = set()
        self._counts: dict[tuple[str, Period, str], Spent] = {}

    def record(self, charges: Sequence[Charge]) -> int:
        new = 0
        for c in charges:
            if (c.scope, c.message_id, c.generation) in self._seen:
                continue
            self._seen.add((c.scope, c.message_id, c.generation))
            new += 1
            for period in Period:
                key = (c.scope, period, bucket(period, c.at_ms))
                was = self._counts.get(key, Spent())
                self._counts[key] = Spent(was.tokens + c.tokens, was.cost_micros + c.cost_micros)
        return new

    async def spent(self, scope: str, periods: Sequence[Period], now_ms: int) -> dict[Period, Spent]:
        return {p: self._counts.get((scope, p, bucket(p, now_ms)), Spent()) for p in periods}
