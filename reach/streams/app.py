"""The faust app hosting the router and the status fold: worker lifecycle, timers and web views.

Built by `build_app(settings, role=...)`; nothing is created at import time. faust runs no agent on
the capability topics (it cannot subscribe by pattern, and its per-event path is ~30x below
confluent-kafka here, see docs/decisions/0001-router-hot-path.md), nor on receipts (the status fold
is a confluent-kafka loop over RocksDB stores, docs/decisions/0004-status-engine.md): faust Services
start those threads when the worker starts and stop them when it stops. The role picks what runs
here: `route` (hot path, delay tiers), `status` (status fold, timekeeper, canary controller, audit writer) or
`all`; any role answers `/messages/{id}` and `/traces/{id}`, forwarding to the fold worker that owns the key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

from reach import heap
from reach.channels.closure import ChannelCallbacks
from reach.core.healthmodel.settings import HealthSettings
from reach.core.spend import Period, Spent
from reach.envelopes import now_ms
from reach.intent.unroutable import IntentHandoff
from reach.kafka import clients, codec, topics, writeas
from reach.metrics import Metrics
from reach.names import Names
from reach.settings import CanarySettings, HealthEnvSettings, KafkaSettings, ReachSettings, RedisSettings
from reach.spendbook import RedisSpendBook
from reach.streams import groupadmin
from reach.streams.audit.writer import AuditWriter
from reach.streams.canary.controller import CanaryController
from reach.streams.credentials import faust_broker_options
from reach.streams.delays.forwarder import DelayForwarder
from reach.streams.dlqwarden import DeadLetterWarden
from reach.streams.feed import Feed
from reach.streams.gauges import Gauges
from reach.streams.health import HealthWriter
from reach.streams.health.gauges import HealthGauges
from reach.streams.router.budgets import TenantBudgets
from reach.streams.router.route_loop import Router
from reach.streams.router.stats import summary_line
from reach.streams.status.fallbacks import PolicyFallbacks
from reach.streams.status.fold import StatusFold, fold_group
from reach.streams.status.lookup import Owners
from reach.streams.status.views import StatusViews, attach_status_views
from reach.streams.timekeeper.policies import Policies
from reach.streams.timekeeper.sweep import Timekeeper
from reach.streams.usage.counter import UsageCounter
from reach.streams.views import attach_views
from reach.streams.webauth import GuardedPages, required_token
from reach.webclient import auth_headers

log = logging.getLogger("reach.router")


class Role(StrEnum):
    """What one `reach router` process runs."""

    ROUTE = "route"  # the routing hot path and the delay tiers
    STATUS = "status"  # the status fold, its retention, the timekeeper
    ALL = "all"


def _internal_replication(spec: topics.TopicsFile, kafka: KafkaSettings) -> int:
    """The replication factor of the topics faust creates itself (its changelogs, its leader topic): the
    file's, for the cluster's size (3 on three brokers), as `reach topics apply` gives the listed topics."""
    try:
        brokers = len(clients.admin(kafka).list_topics(timeout=10).brokers)
    except Exception as exc:  # noqa: BLE001 - the worker's own start reports an unreachable broker clearly
        log.warning("cluster size unknown (%s): faust's own topics get replication factor %d", exc,
                    spec.replication_factor)
        return spec.replication_factor
    return spec.replication(max(brokers, 1))[0]


def build_app(
    settings: ReachSettings | None = None,
    *,
    kafka: KafkaSettings | None = None,
    batch_size: int = 500,
    summary_interval: float = 10.0,
    role: Role = Role.ALL,
    health_settings: HealthSettings | None = None,
    redis: RedisSettings | None = None,
    canary: CanarySettings | None = None,
) -> Any:
    """A faust.App whose worker runs what `role` names.

    `app.reach_router` is the Router (None without the route role); `app.reach_status` the StatusFold and
    `app.reach_health` the HealthWriter (both None without the status role)."""
    import faust
    from mode import Service

    # the stream app's entry point: every setting not given is built from the environment here, and passed down
    reach_settings: ReachSettings = settings or ReachSettings()
    kafka = kafka or KafkaSettings()
    redis = redis or RedisSettings()
    codec.use_schema_registry(reach_settings.schema_registry_url)
    writeas.use(reach_settings.records_write_as)
    names = Names(reach_settings.namespace)
    spec = topics.load(reach_settings.topics_file)
    partitions = spec.topics["receipts"].partitions
    url = f"http://{reach_settings.web_host}:{reach_settings.web_port}"
    datadir = reach_settings.home / "faust" / f"{names.router_app_id}-data"
    datadir.parent.mkdir(parents=True, exist_ok=True)  # faust creates the data dir, not its parents
    app = faust.App(
        names.router_app_id,
        **faust_broker_options(kafka),
        web_port=reach_settings.web_port,
        web_bind=reach_settings.web_host,
        # faust's own pages (/router, /table, stats) are not behind the views' token: serve only ours
        web_router_enabled=False,
        web_tables_enabled=False,
        web_stats_enabled=False,
        web_graph_enabled=False,
        canonical_url=url,
        autodiscover=False,
        store="memory://",
        # faust's default data dir is `<app id>-data` in the working directory; keep it under REACH_HOME
        datadir=str(datadir),
        topic_replication_factor=_internal_replication(spec, kafka),
        topic_partitions=partitions,
        # a restarted worker must not wait out a killed one for faust's 60 s default
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
    )
    # one consumer tails registry, control, health, loads and receipts for every view of this process
    # (docs/decisions/0033-one-feed-per-process.md); each view subscribes here, before anything starts
    feed = Feed(names=names, kafka=kafka)
    router = (Router(kafka=kafka, reach=reach_settings, redis=redis, batch_size=batch_size,
                     handoff=IntentHandoff(), feed=feed, budgets=_tenant_budgets(reach_settings, redis))
              if role != Role.STATUS else None)
    # metric labels only for registered capabilities; a status-only worker has no registry: only the bound applies
    metrics = Metrics(capabilities=(lambda: router.state.capabilities(now_ms())) if router is not None else None)
    if router is not None:
        router.observe_decision = metrics.decision.observe
    fold = None
    health: HealthWriter | None = None
    policy = router.state.control.policy if router is not None else Policies(names=names, feed=feed).policy
    if role != Role.ROUTE:
        # one directory per worker (host and port identify it), so two workers on one machine never share a store
        worker = f"{reach_settings.web_host}-{reach_settings.web_port}"
        state_dir = reach_settings.home / "status" / names.namespace / worker
        fold = StatusFold(names=names, kafka=kafka, metrics=metrics, state_dir=state_dir, url=url,
                          retention_ms=reach_settings.status_retention * 1000, callbacks=ChannelCallbacks(),
                          fallbacks=PolicyFallbacks(policy=policy, kafka=kafka))
        # the single writer of <ns>.health for the partitions its group gives this worker (reach.streams.health)
        health = HealthWriter(names=names, kafka=kafka, settings=health_settings or HealthEnvSettings(),
                              on_publish=HealthGauges(metrics.registry).publish, feed=feed)
    views = StatusViews(fold=fold, owners=Owners(groupadmin.shared(kafka), fold_group(names)), partitions=partitions,
                        url=url, auth=auth_headers(reach_settings))
    pages = GuardedPages(app, required_token(reach_settings))
    attach_status_views(pages, views)
    attach_views(pages, router, metrics, fold, health)
    if router is not None:
        _host_router(app, Service, router, DelayForwarder(names=names, tiers=spec.retry_tiers(), kafka=kafka,
                                                    max_bytes=spec.dead_letter_bytes(), redis=redis),
                     reach_settings.namespace, summary_interval)
    if fold is not None:
        timekeeper = Timekeeper(names=names, tiers=spec.retry_tiers(), kafka=kafka, policy=policy, redis=redis)
        gauges = Gauges(names=names, kafka=kafka, router=router, metrics=metrics,
                        stale_after_ms=reach_settings.stale_no_route * 1000)
        controller = CanaryController(names=names, kafka=kafka, settings=canary or CanarySettings(), feed=feed)
        usage = UsageCounter(names=names, kafka=kafka, currency=reach_settings.currency,
                             book=lambda: RedisSpendBook.from_url(redis.url(reach_settings.home),
                                                                  namespace=names.namespace))
        warden = DeadLetterWarden(names=names, kafka=kafka, policy=policy)
        _host_fold(app, Service, fold, timekeeper, gauges, health, controller, AuditWriter(names=names, kafka=kafka),
                   usage, warden, stale_after_ms=reach_settings.stale_no_route * 1000)
    app.reach_router = router  # type: ignore[attr-defined]  # (faust's own `app.router` routes table keys)
    app.reach_status = fold  # type: ignore[attr-defined]
    app.reach_health = health  # type: ignore[attr-defined]
    return app


def _host_router(app: Any, service: Any, router: Router, delays: DelayForwarder, namespace: str,
                 summary_interval: float) -> None:
    class RouterService(service):  # type: ignore[misc, valid-type]
        """Starts the confluent hot path and the delay tiers with the worker; stops them (flushed) with it."""

        async def on_start(self) -> None:
            await asyncio.get_running_loop().run_in_executor(None, lambda: router.start(ready_timeout=60))
            delays.start()
            heap.settle()
            log.info("router ready: namespace %s", namespace)

        async def on_stop(self) -> None:
            loop = asyncio.get_running_loop()  # both finish their batch and flush at once
            await asyncio.gather(loop.run_in_executor(None, delays.stop), loop.run_in_executor(None, router.stop))

        @service.task  # type: ignore[misc]
        async def _summaries(self) -> None:
            before = router.stats.snapshot()
            while not self.should_stop:
                await self.sleep(summary_interval)
                after = router.stats.snapshot()
                log.info(summary_line(before, after))
                before = after

    app.service(RouterService)


def _host_fold(app: Any, service: Any, fold: StatusFold, timekeeper: Timekeeper, gauges: Gauges,
               health: HealthWriter | None, canary: CanaryController, audit: AuditWriter, usage: UsageCounter,
               warden: DeadLetterWarden, *, stale_after_ms: int) -> None:
    class StatusService(service):  # type: ignore[misc, valid-type]
        """Starts the status fold, the canary controller, the audit writer, the usage counter and the dead-letter
        warden with the worker; stops them (flushed) with it."""

        async def on_start(self) -> None:
            fold.start()
            if health is not None:
                health.start()
            canary.start()
            audit.start()
            usage.start()
            warden.start()
            heap.settle()

        async def on_stop(self) -> None:
            # side loops at once, each in its own group: a consumer's close may wait for its group's rebalance (a
            # crashed worker's member lingers until its session times out), and one after another those waits add up
            loop = asyncio.get_running_loop()
            side = [canary.stop, audit.stop, usage.stop, warden.stop, *([health.stop] if health is not None else [])]
            await asyncio.gather(*(loop.run_in_executor(None, stop) for stop in side))
            await loop.run_in_executor(None, fold.stop)

    def tick() -> None:  # RocksDB reads and row parsing: off the event loop, with the tick
        rows = fold.due_rows(now_ms())
        if rows:
            timekeeper.tick(rows)

    @app.timer(interval=0.5)
    async def keep_time() -> None:
        await _guarded("timekeeper", tick)

    @app.timer(interval=15.0)
    async def observe() -> None:
        await _guarded("gauges", lambda: gauges.update(fold.no_route_rows(now_ms() - stale_after_ms),
                                                       fold.table_size()))

    app.service(StatusService)


def _tenant_budgets(reach: ReachSettings, redis: RedisSettings) -> TenantBudgets | None:
    """The router's check of REACH_TENANT_LIMITS, its Redis client made on the first read; None without limits."""
    limits = reach.tenant_spend_limits()
    if not limits:
        return None
    books: list[RedisSpendBook] = []

    def read(scope: str, periods: Sequence[Period], now: int) -> dict[Period, Spent]:
        if not books:
            books.append(RedisSpendBook.from_url(redis.url(reach.home), namespace=reach.namespace))
        return books[0].spent(scope, periods, now)

    return TenantBudgets(limits, read)


async def _guarded(what: str, fn: Callable[..., object], *args: object) -> None:
    """Run blocking periodic work in an executor; a failure is logged and retried next tick, because an
    exception escaping a faust timer stops the whole worker."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, fn, *args)
    except Exception:  # noqa: BLE001
        log.exception("%s failed; trying again next tick", what)
