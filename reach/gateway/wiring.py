"""Build the gateway's real dependencies (Kafka, Redis, the stream app's views) around the door's guards.

The guards (Authenticator, Quotas of reach.gateway.ports) are a parameter: `reach gateway` passes the
Kafka/Redis-backed ones from `door_guards` (reach.gateway.door), tests may pass in-memory fakes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reach import clients
from reach.client import Client
from reach.gateway.catalog import RegistryCatalog
from reach.gateway.deps import Dependencies
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.idempotency import RedisIdempotency
from reach.gateway.ports import Authenticator, Quotas
from reach.gateway.publisher import KafkaPublisher
from reach.gateway.redisconn import door_client
from reach.gateway.replies import ReplyHub, gateway_client_id
from reach.gateway.settings import GatewaySettings
from reach.gateway.statusclient import StatusClient
from reach.settings import KafkaSettings, ReachSettings, RedisSettings


@dataclass(frozen=True)
class Guards:
    """Who may come in and how fast: the door's two pluggable checks, and what stops them."""

    authenticator: Authenticator
    quotas: Quotas
    closers: tuple[Callable[[], Any], ...] = ()


def door_guards(reach: ReachSettings) -> Guards:
    """The Kafka-backed apps directory, signature check and Redis quotas that `reach apps` manages
    (reach.gateway.door.open_door, from REACH_GATEWAY_* settings); returns once the directory is read."""
    from reach.gateway.door import open_door  # here, so the HTTP service's tests never need the secrets key

    door = open_door(reach=reach)
    return Guards(authenticator=door.authenticator, quotas=door.quotas, closers=(door.close, door.aclose))


def build_dependencies(guards: Guards, *, port: int, kafka: KafkaSettings | None = None,
                       reach: ReachSettings | None = None, http: HttpSettings | None = None,
                       redis: RedisSettings | None = None) -> Dependencies:
    """Connect to the broker (InfraUnavailable when it does not answer), read the registry, open the reply topic."""
    kafka = kafka or KafkaSettings()
    reach = reach or ReachSettings()
    http = http or HttpSettings()
    clients.check_reachable(clients.admin(kafka))
    client = Client(kafka=kafka, settings=reach, source="gateway")
    catalog = RegistryCatalog(names=client.names, kafka=kafka)
    catalog.start()
    replies = ReplyHub(client, client_id=gateway_client_id(port))
    publisher = KafkaPublisher(client, ack_timeout_s=http.ack_timeout)
    status = StatusClient(reach, http.status_url)
    timeout = GatewaySettings().redis_timeout  # the door's bound on one Redis call
    from reach.console.wiring import open_console  # here: the console follows the apps topic for operators

    console = open_console(reach=reach, kafka=kafka, status_url=status.base_url)
    idempotency = RedisIdempotency(door_client((redis or RedisSettings()).url(reach.home), timeout_s=timeout),
                                   reach.namespace)
    return Dependencies(authenticator=guards.authenticator, quotas=guards.quotas, publisher=publisher,
                        replies=replies, status=status, catalog=catalog, idempotency=idempotency, console=console,
                        closers=(publisher.close, replies.close, catalog.close, status.aclose, idempotency.aclose,
                                 console.close, *guards.closers))
