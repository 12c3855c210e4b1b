"""The door's Redis: a client with bounded timeouts, and its failures as InfraUnavailable (HTTP 503)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.asyncio import BlockingConnectionPool, Redis

from reach.errors import InfraUnavailable
from reach.redisclient import AsyncRedis, async_client, is_cluster, tls_options

MAX_CONNECTIONS = 64  # one command each at a time; ~0.2 ms a round trip, so far more than 1,000 calls/s
CLUSTER_CONNECTIONS = 256  # per node: a cluster client refuses past it, so well above the blocking pool's
POOL_WAIT_S = 5.0  # a request waits this long for a free connection (a burst), then gets its 503


def door_client(url: str, *, timeout_s: float = 0.5) -> AsyncRedis:
    """A pooled asyncio client (on the event loop: no thread per call) whose calls fail after `timeout_s`
    instead of holding a request; its connections belong to the loop that first uses them. A burst of
    requests waits for one of MAX_CONNECTIONS (the plain pool would refuse past its limit at once). On a Redis
    Cluster (`redis+cluster://`) each node gets CLUSTER_CONNECTIONS (redis-py's cluster has no blocking pool;
    the door's scripts are batched per loop turn, so a few connections per node carry the load)."""
    if is_cluster(url):
        return async_client(url, max_connections=CLUSTER_CONNECTIONS, socket_timeout=timeout_s,
                            socket_connect_timeout=timeout_s, health_check_interval=30)
    pool = BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=POOL_WAIT_S,
                                           socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                           health_check_interval=30, **tls_options(url, {}))
    return Redis(connection_pool=pool)


@contextmanager
def guarded(what: str) -> Iterator[None]:
    """Turn a Redis failure inside the block into InfraUnavailable naming `what` was being done."""
    try:
        yield
    except (redis.RedisError, OSError) as exc:
        raise InfraUnavailable(f"Redis did not answer while {what} ({type(exc).__name__}: {exc}); expected "
                               "a reachable REACH_REDIS_URL. Requests are refused (503) until it answers.") from None
