"""The door's Redis: a client with bounded timeouts, and its failures as InfraUnavailable (HTTP 503)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from reach.errors import InfraUnavailable


def door_client(url: str, *, timeout_s: float = 0.5) -> redis.Redis:
    """A pooled client whose calls fail after `timeout_s` instead of holding a request (and its worker)."""
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                health_check_interval=30)


@contextmanager
def guarded(what: str) -> Iterator[None]:
    """Turn a Redis failure inside the block into InfraUnavailable naming `what` was being done."""
    try:
        yield
    except (redis.RedisError, OSError) as exc:
        raise InfraUnavailable(f"Redis did not answer while {what} ({type(exc).__name__}: {exc}); expected "
                               "a reachable REACH_REDIS_URL. Requests are refused (503) until it answers.") from None
