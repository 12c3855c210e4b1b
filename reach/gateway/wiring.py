"""Build the gateway's real dependencies (Kafka, Redis, the stream app's views) around the door's guards.

The guards (Authenticator, Quotas of reach.gateway.ports) are a parameter: `reach gateway` passes the
Kafka/Redis-backed ones from `door_guards` (reach.gateway.door), tests may pass in-memory fakes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reach import client as sdk
from reach.a2a.cancelsink import KafkaCancels
from reach.a2a.pushsender import open_push
from reach.callers import AppDirectory
from reach.channels.settings import ClosureSettings, ReportSettings
from reach.gateway.budgets import Budgets
from reach.gateway.catalog import RegistryCatalog
from reach.gateway.deps import Dependencies
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.idempotency import RedisIdempotency
from reach.gateway.ports import Authenticator, Quotas
from reach.gateway.publisher import KafkaPublisher
from reach.gateway.redisconn import door_client
from reach.gateway.replies import gateway_client_id
from reach.gateway.settings import GatewaySettings
from reach.gateway.statusclient import StatusClient
from reach.kafka import clients
from reach.names import Names
from reach.ops.turns import BusTurns
from reach.replyhub import ReplyHub
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.spendbook import RedisSpendReader

if TYPE_CHECKING:
    from reach.console.wiring import Console


@dataclass(frozen=True)
class GatewayConfig:
    """Every setting a gateway process uses: its entry point (`reach gateway`) builds them once from the
    environment and passes them down; nothing below reads the environment."""

    reach: ReachSettings
    kafka: KafkaSettings
    redis: RedisSettings
    gateway: GatewaySettings
    http: HttpSettings
    closure: ClosureSettings
    reports: ReportSettings | None = None  # the providers' report secrets (POST /v1/reports/...); None: off
    push_allow_private: bool = False  # A2A push URLs may name private addresses (REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE)


@dataclass(frozen=True)
class Guards:
    """Who may come in and how fast: the door's two pluggable checks, and what stops them."""

    authenticator: Authenticator
    quotas: Quotas
    directory: AppDirectory | None = None
    closers: tuple[Callable[[], Any], ...] = ()


def door_guards(config: GatewayConfig) -> Guards:
    """The Kafka-backed apps directory, signature check and Redis quotas that `reach apps` manages
    (reach.gateway.door.open_door, from REACH_GATEWAY_* settings); returns once the directory is read."""
    from reach.gateway.door import open_door  # here, so the HTTP service's tests never need the secrets key

    door = open_door(gateway=config.gateway, reach=config.reach, kafka=config.kafka, redis=config.redis)
    return Guards(authenticator=door.authenticator, quotas=door.quotas, directory=door.directory,
                  closers=(door.close, door.aclose))


def build_dependencies(guards: Guards, *, port: int, config: GatewayConfig) -> Dependencies:
    """Connect to the broker (InfraUnavailable when it does not answer), read the registry, open the reply topic."""
    kafka, reach, http = config.kafka, config.reach, config.http
    clients.check_reachable(clients.admin(kafka))
    client = sdk.Client(kafka=kafka, settings=reach, source="gateway")
    catalog = RegistryCatalog(names=client.names, kafka=kafka)
    catalog.start()
    replies = ReplyHub(client, client_id=gateway_client_id(port), name="reach-gateway-replies")
    publisher = KafkaPublisher(client, ack_timeout_s=http.ack_timeout)
    status = StatusClient(reach, http.status_url)
    timeout = config.gateway.redis_timeout  # the door's bound on one Redis call
    console = open_console(reach=reach, kafka=kafka, redis=config.redis, gateway=config.gateway,
                           status_url=status.base_url)
    idempotency = RedisIdempotency(door_client(config.redis.url(reach.home), timeout_s=timeout),
                                   reach.namespace)
    cancels = KafkaCancels(topic=client.names.cancels, kafka=kafka)
    turns = BusTurns(client, kafka=kafka, redis_url=config.redis.url(reach.home))
    spend = door_client(config.redis.url(reach.home), timeout_s=timeout)
    budgets = Budgets(RedisSpendReader(spend, namespace=reach.namespace), warn=config.gateway.budget_warn,
                      cache_s=config.gateway.budget_cache_s, tenants=reach.tenant_spend_limits())
    pushing = open_push(client.names, kafka, allow_private=config.push_allow_private)
    push_closers = (pushing[1].close, pushing[0].close) if pushing is not None else ()
    return Dependencies(authenticator=guards.authenticator, quotas=guards.quotas, publisher=publisher,
                        replies=replies, status=status, catalog=catalog, idempotency=idempotency, console=console,
                        directory=guards.directory, cancels=cancels, turns=turns, budgets=budgets, receipts=publisher,
                        push=pushing[0] if pushing is not None else None, namespace=reach.namespace,
                        status_retention_s=reach.status_retention,
                        closers=(*push_closers, publisher.close, cancels.close, turns.close, replies.close,
                                 catalog.close, status.aclose, idempotency.aclose, spend.aclose, console.close,
                                 *guards.closers))


def open_console(*, reach: ReachSettings, kafka: KafkaSettings, redis: RedisSettings, gateway: GatewaySettings,
                 status_url: str | None = None, ready_timeout: float = 30.0) -> Console:
    """The console this gateway hosts (reach.console.wiring.Console, its port): operator tokens from the apps
    topic over the gateway's secrets key (returns once caught up), the backend over the namespace's topics."""
    # here, as before the move: only building a console loads its modules and follows the apps topic for operators
    from reach.console.backend import ConsoleBackend
    from reach.console.operators import OperatorTable
    from reach.console.wiring import Console, OperatorDirectory
    from reach.gateway.directory import KafkaAppDirectory
    from reach.secretbox import secret_box

    box = secret_box(gateway.secrets_key, reach.home, create=False)
    names = Names(reach.namespace)
    table = OperatorTable(box)
    directory = KafkaAppDirectory(names=names, box=box, kafka=kafka, table=table)
    directory.start(ready_timeout)
    operators = OperatorDirectory(directory, table)
    backend = ConsoleBackend(names=names, kafka=kafka, reach=reach, redis=redis, status_url=status_url, box=box)
    return Console(operators=operators, backend=backend, close=operators.stop)
