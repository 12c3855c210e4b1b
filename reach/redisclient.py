"""Redis clients from a URL: one node (`redis://`, `rediss://`) or a Redis Cluster (`redis+cluster://`,
`rediss+cluster://`, any node of the cluster as the seed; redis-py discovers the others and follows MOVED / ASK).

The URL alone chooses, so the one setting REACH_REDIS_URL (or the URL `reach local up` records) reaches every user
(agent leases and result cache, the first-terminal fence, gateway quotas, nonces and idempotency, handoff claims,
the channel board). Every key a Lua script touches carries one hash tag (`{...}`, see `tag`), so each script runs
on one slot; a read over many slots goes through `mget` here, per slot on a cluster
(docs/decisions/0031-redis-cluster-and-bounded-result-cache.md). Imports none of its users.

Every single-node client made here counts its round trips in `reach_redis_round_trips_total` (prometheus_client's
default registry, one count per process): one per packed write a connection sends, so a pipeline or a batch of
scripts sent together is one, and a connection's handshake and health-check PINGs count as what they are
(docs/decisions/0058-peers-and-per-request-figures.md). A cluster client is not counted yet."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from functools import cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from prometheus_client import Counter
from redis.crc import key_slot

from reach.errors import InfraUnavailable

SyncRedis = redis.Redis | redis.cluster.RedisCluster
AsyncRedis = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""A cluster URL's scheme and the node scheme its connections use."""


def is_cluster(url: str) -> bool:
    """Whether the URL names a Redis Cluster (`redis+cluster://host:port`)."""
    return urlsplit(url).scheme.lower() in CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """The URL redis-py's cluster client is given: the node scheme, no database (a cluster has only db 0)."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme.lower(), parts.scheme)
    return urlunsplit((scheme, parts.netloc, "", parts.query, ""))


def tls_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` with the server's host name checked against its certificate on a TLS URL, whatever the redis-py
    release's default (before 6.0 it was off); a URL's own `?ssl_check_hostname=` still decides (decision 0060)."""
    if urlsplit(url).scheme.lower() in ("rediss", "rediss+cluster"):
        return {"ssl_check_hostname": True, **options}
    return options


ROUND_TRIPS = Counter("reach_redis_round_trips_total",
                      "Round trips to Redis this process made: packed writes sent (a pipeline is one)")


class _CountedSync:
    """Mixed into a blocking connection class: each packed write sent is one round trip."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        ROUND_TRIPS.inc()
        super().send_packed_command(command, check_health)  # type: ignore[misc]


class _CountedAsync:
    """Mixed into an asyncio connection class: each packed write sent is one round trip."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        ROUND_TRIPS.inc()
        await super().send_packed_command(command, check_health)  # type: ignore[misc]


@cache
def _counted(connection_class: type, mixin: type) -> type:
    """`connection_class` with its writes counted (one subclass per class: plain, TLS, unix socket)."""
    if issubclass(connection_class, mixin):
        return connection_class
    return type(f"Counted{connection_class.__name__}", (mixin, connection_class), {})


def count_round_trips(client: SyncRedis | AsyncRedis) -> None:
    """Count a single-node client's round trips in ROUND_TRIPS (its pool makes counted connections from now on;
    call it before the first command). A cluster client is left as it is."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_class"):
        return
    mixin = _CountedAsync if isinstance(client, redis.asyncio.Redis) else _CountedSync
    pool.connection_class = _counted(pool.connection_class, mixin)


def sync_client(url: str, **options: Any) -> SyncRedis:
    """A blocking client for `url`: redis.Redis, or redis.cluster.RedisCluster for a cluster URL."""
    options = tls_options(url, options)
    if is_cluster(url):
        return redis.cluster.RedisCluster.from_url(node_url(url), **options)
    client = redis.Redis.from_url(url, **options)
    count_round_trips(client)
    return client


def async_client(url: str, **options: Any) -> AsyncRedis:
    """An asyncio client for `url`: redis.asyncio.Redis, or redis.asyncio.cluster.RedisCluster for a cluster URL
    (`max_connections` is then per node)."""
    options = tls_options(url, options)
    if is_cluster(url):
        return redis.asyncio.cluster.RedisCluster.from_url(node_url(url), **options)
    client = redis.asyncio.Redis.from_url(url, **options)
    count_round_trips(client)
    return client


def where(url: str) -> str:
    """The URL without its credentials and query (`rediss://host:port/0`): what an error or a log may show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_credentials(url: str, timeout: float = 5.0) -> None:
    """PING Redis once; raise InfraUnavailable (CLI exit 4) when its TLS handshake or its login is refused.

    Entry points call it before they start, so a wrong CA or password is one clear line instead of a worker that
    retries a handshake forever. A Redis that does not answer passes: every user already rides out an outage
    (leases, fence and cache are losable), and a worker started before its Redis must still start."""
    try:
        client = sync_client(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - redis-py wraps TLS and socket failures in several types
        if refused(exc):
            raise InfraUnavailable(refusal(url, exc)) from None


def refused(exc: BaseException) -> bool:
    """Whether a failed call means wrong credentials or TLS set-up (not an outage that passes)."""
    return _auth_failure(exc) or _tls_failure(exc)


def refusal(url: str, exc: BaseException) -> str:
    """What a failed PING of `url` means, and what to check."""
    shown = where(url)
    text = str(exc).rstrip(". ")
    if _auth_failure(exc):
        return (f"Redis authentication failed at {shown}: {text}. Check the user and password in REACH_REDIS_URL "
                "(rediss://user:password@host:port/0).")
    if _tls_failure(exc):
        return (f"Redis TLS handshake failed at {shown}: {text}. Check REACH_REDIS_CA_FILE (the CA that signed "
                "Redis's certificate) and that REACH_REDIS_URL starts with rediss://.")
    hint = "" if shown.startswith("rediss") else " If that Redis serves TLS only, use a rediss:// URL."
    return f"Redis does not answer at {shown} ({type(exc).__name__}: {text}). Check REACH_REDIS_URL.{hint}"


def _auth_failure(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, redis.AuthenticationError | redis.exceptions.NoPermissionError) or any(
        m in text for m in ("WRONGPASS", "NOAUTH", "invalid username-password"))


def _tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(seen) or "SSL" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def tag(value: str) -> str:
    """`{value}`: a hash tag, so every key built around it lands on one slot. `%`, `{` and `}` inside `value` are
    percent-escaped (Redis hashes only up to the first `}`, and an empty tag hashes the whole key); escaping keeps
    distinct values distinct. An empty value is `{%}` (a lone `%` never comes out of the escaping)."""
    escaped = value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return "{" + (escaped or "%") + "}"


def slot_of(key: str | bytes) -> int:
    """The cluster slot of a key (CRC16 of its hash tag, else of the whole key, mod 16384)."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def by_slot(keys: Sequence[str]) -> dict[int, list[int]]:
    """The positions of `keys` grouped by slot, in order: a multi-key call is split into one call per group."""
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(slot_of(key), []).append(i)
    return groups


def mget(client: SyncRedis, keys: Sequence[str]) -> list[Any]:
    """MGET of keys on any slots: one command on a single node, one per slot on a cluster (values in key order)."""
    if not keys:
        return []
    if isinstance(client, redis.cluster.RedisCluster):
        return list(client.mget_nonatomic(list(keys)))
    return list(client.mget(list(keys)))
