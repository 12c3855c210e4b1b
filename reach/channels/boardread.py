"""Reading the channel health board from Redis (for `reach channels`): every instance's latest snapshot."""

from __future__ import annotations

from redis.exceptions import RedisError

from reach.channels import board
from reach.errors import InfraUnavailable
from reach.redisclient import SyncRedis, mget, sync_client
from reach.settings import RedisSettings


def read_board(redis: SyncRedis | RedisSettings, namespace: str) -> list[board.Snapshot]:
    """The snapshots of the namespace's live channel instances (InfraUnavailable when Redis does not answer);
    `redis` is a client, or the settings of one to open for this read."""
    client = (sync_client(redis.url(), socket_timeout=2, socket_connect_timeout=2)
              if isinstance(redis, RedisSettings) else redis)
    try:
        keys = list(client.scan_iter(match=board.pattern(namespace), count=500))
        values = mget(client, keys)  # on a cluster: scan walks every primary, mget goes per slot
    except RedisError as exc:
        raise InfraUnavailable(f"Redis did not answer ({exc}); check REACH_REDIS_URL, or `reach local up`.") from exc
    finally:
        if client is not redis:
            client.close()
    return [snap for raw in values if raw is not None and (snap := board.decode(raw)) is not None]
