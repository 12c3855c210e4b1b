"""Wiring of the door from the settings: the apps directory, nonces, quotas and the authenticator."""

from __future__ import annotations

from dataclasses import dataclass

from reach.gateway.auth import SignatureAuthenticator
from reach.gateway.directory import KafkaAppDirectory
from reach.gateway.nonces import RedisNonceStore
from reach.gateway.quotas import RedisQuotas
from reach.gateway.redisconn import door_client
from reach.gateway.settings import GatewaySettings
from reach.names import Names
from reach.redisclient import AsyncRedis
from reach.secretbox import secret_box
from reach.settings import KafkaSettings, ReachSettings, RedisSettings


@dataclass(frozen=True, slots=True)
class Door:
    """What the HTTP service checks every request with; `close()` stops the directory's thread, `aclose()`
    the Redis connections (on the loop that used them)."""

    directory: KafkaAppDirectory
    nonces: RedisNonceStore
    quotas: RedisQuotas
    authenticator: SignatureAuthenticator
    client: AsyncRedis

    def close(self) -> None:
        self.directory.stop()

    async def aclose(self) -> None:
        await self.client.aclose()


def open_door(*, gateway: GatewaySettings, reach: ReachSettings, kafka: KafkaSettings, redis: RedisSettings,
              ready_timeout: float = 30.0) -> Door:
    """Build the door and return once the apps directory has caught up with the apps topic.

    ConfigError when no secrets key is there (the gateway never makes one), InfraUnavailable when the
    broker does not answer in `ready_timeout`."""
    box = secret_box(gateway.secrets_key, reach.home, create=False)
    directory = KafkaAppDirectory(names=Names(reach.namespace), box=box, kafka=kafka)
    directory.start(ready_timeout)
    client = door_client(redis.url(reach.home), timeout_s=gateway.redis_timeout)
    nonces = RedisNonceStore(client=client, namespace=reach.namespace)
    quotas = RedisQuotas(client=client, namespace=reach.namespace, capability_limit=gateway.capability_limit,
                         read_limit=gateway.read_limit)
    authenticator = SignatureAuthenticator(directory=directory, nonces=nonces, max_age_s=gateway.signature_max_age,
                                           max_ahead_s=gateway.signature_max_ahead, accept_v1=gateway.accept_v1)
    return Door(directory=directory, nonces=nonces, quotas=quotas, authenticator=authenticator, client=client)
