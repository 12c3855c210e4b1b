"""When Redis's memory began, per namespace: `<ns>:memory-since` holds the epoch ms it was first written (SET NX).

A Redis that comes back empty (restarted without its AOF, flushed, replaced) loses the key with everything else,
and the next reader writes it again with its own now: every register, lease and business key older than that may
be gone. The SDK reads it (cached for `max_age_s`, dropped on a Redis error so a restart is seen at once) to know
when a claim that Redis calls "ours" must also ask Kafka: the status table for messages created before it, the key
ledger for business keys within one window after it (reach.core.retention,
docs/decisions/0041-idempotency-and-sessions-from-kafka.md). One key on one node: on a Redis Cluster it tells the
loss of the node that holds it (see the decision record).

One read at a time: the handlers that ask while the cached value is stale share one SET NX + GET. Each asked on its
own, a batch of claims (they return together, Leases pipelines them) opened one pooled Redis connection per handler
at once, and the pool keeps what it opened: a soak's steady agent held 28 more sockets after one backlog burst."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from reach.envelopes import now_ms
from reach.redisclient import AsyncRedis


class Memory(Protocol):
    """What the pipeline asks of the mark (MemoryMark; a fixed value in tests)."""

    async def since(self) -> int: ...

    def known(self) -> int | None: ...

    def forget(self) -> None: ...


def mark_key(namespace: str) -> str:
    return f"{namespace}:memory-since"


class MemoryMark:
    """`await since()`: the epoch ms this Redis's memory of the namespace began (writing it when absent)."""

    def __init__(self, redis: AsyncRedis, *, namespace: str, max_age_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], int] = now_ms) -> None:
        self._redis = redis
        self._key = mark_key(namespace)
        self._max_age_s = max_age_s
        self._clock = clock
        self._wall = wall
        self._value: int | None = None
        self._at = 0.0
        self._reading: asyncio.Task[int] | None = None  # the read in flight, shared by whoever asks meanwhile
        self._epoch = 0  # forget() moves it on: a read begun before does not store what it read

    def known(self) -> int | None:
        """What `since` would answer without asking Redis (read less than `max_age_s` ago), else None."""
        if self._value is not None and self._clock() - self._at < self._max_age_s:
            return self._value
        return None

    async def since(self) -> int:
        """May raise what Redis raises (the caller guards it, reach.agent.redisguard)."""
        known = self.known()
        if known is not None:
            return known
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read(self._epoch))
            self._reading.add_done_callback(self._read_done)
        return await asyncio.shield(self._reading)  # a cancelled caller leaves the read to the others

    async def _read(self, epoch: int) -> int:
        await self._redis.set(self._key, str(self._wall()), nx=True)
        raw = await self._redis.get(self._key)
        value = int(raw) if raw is not None else self._wall()
        if epoch == self._epoch:
            self._value, self._at = value, self._clock()
        return value

    def _read_done(self, task: asyncio.Task[int]) -> None:
        if self._reading is task:
            self._reading = None
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have been cancelled meanwhile

    def forget(self) -> None:
        """Redis failed: it may come back empty, so the next `since` reads the mark again."""
        self._value, self._reading = None, None
        self._epoch += 1
