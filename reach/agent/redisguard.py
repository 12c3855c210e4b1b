"""Calls to Redis (a cache) behind one shared Outage: while it is out they are skipped, not each timed out."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

from reach.agent.outage import Outage

log = logging.getLogger("reach.agent")
REDIS_ERRORS = (RedisError, OSError, TimeoutError)
T = TypeVar("T")


async def redis_call(outage: Outage, call: Callable[[], Awaitable[T]]) -> T | None:
    """`call()`, or None while Redis is unreachable (backing off between tries instead of stopping)."""
    if not outage.available():
        return None
    try:
        value = await call()
    except REDIS_ERRORS as exc:
        if not outage.down:
            log.warning("Redis is unreachable (%s); leases and caches are off, the status table is asked "
                        "instead, until Redis answers again", exc)
        outage.failed()
        return None
    if outage.down:
        log.warning("Redis answers again; leases and caches are back")
    outage.recovered()
    return value
