"""The faust app hosting the router: worker lifecycle and web views; the hot path is reach.streams.router.

Built by `build_app(settings)`; nothing is created at import time. faust runs no agent on the
capability topics (it cannot subscribe by pattern, and its per-event path is ~30x below
confluent-kafka here, see docs/decisions/0001-router-hot-path.md): a faust Service starts the
confluent Router's threads when the worker starts and stops them when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from reach import topics
from reach.envelopes import now_ms
from reach.metrics import Metrics
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings
from reach.status import StatusRow
from reach.streams.delays import DelayForwarder
from reach.streams.gauges import Gauges
from reach.streams.router import Router
from reach.streams.stats import summary_line
from reach.streams.status_table import attach_status_table
from reach.streams.timekeeper import Timekeeper
from reach.streams.views import attach_views

log = logging.getLogger("reach.router")


def build_app(
    settings: ReachSettings | None = None,
    *,
    kafka: KafkaSettings | None = None,
    batch_size: int = 500,
    summary_interval: float = 10.0,
) -> Any:
    """A faust.App whose worker runs the Router, the delay tiers, the status table and the timekeeper.

    `app.reach_router` is the Router (usable without faust); `app.reach_status` the status table handle."""
    import faust
    from mode import Service

    reach_settings: ReachSettings = settings or ReachSettings()
    kafka = kafka or KafkaSettings()
    names = Names(reach_settings.namespace)
    spec = topics.load(reach_settings.topics_file)
    router = Router(kafka=kafka, reach=reach_settings, batch_size=batch_size)
    delays = DelayForwarder(names=names, tiers=spec.retry_tiers(), kafka=kafka, max_bytes=spec.dead_letter_bytes())
    timekeeper = Timekeeper(names=names, tiers=spec.retry_tiers(), kafka=kafka, policy=router.state.control.policy)
    metrics = Metrics(capabilities=lambda: router.state.capabilities(now_ms()))
    app = faust.App(
        names.router_app_id,
        broker=f"kafka://{kafka.servers()}",
        web_port=reach_settings.web_port,
        web_bind=reach_settings.web_host,
        canonical_url=f"http://{reach_settings.web_host}:{reach_settings.web_port}",
        autodiscover=False,
        store="memory://",
        topic_replication_factor=spec.replication_factor,
        topic_partitions=spec.topics["receipts"].partitions,
        # a restarted worker must not wait out a killed one for faust's 60 s default before routing
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
    )
    status = attach_status_table(app, names, metrics, partitions=spec.topics["receipts"].partitions,
                                 retention_s=reach_settings.status_retention)
    stop_delays = threading.Event()

    class RouterService(Service):  # type: ignore[misc]
        """Starts the confluent hot path and the delay tiers with the worker; stops them (flushed) with it."""

        async def on_start(self) -> None:
            await asyncio.get_running_loop().run_in_executor(None, lambda: router.start(ready_timeout=60))
            threading.Thread(target=delays.run, args=(stop_delays,), name="reach-delays", daemon=True).start()
            log.info("router ready: namespace %s", reach_settings.namespace)

        async def on_stop(self) -> None:
            stop_delays.set()
            await asyncio.get_running_loop().run_in_executor(None, router.stop)

        @Service.task
        async def _summaries(self) -> None:
            before = router.stats.snapshot()
            while not self.should_stop:
                await self.sleep(summary_interval)
                after = router.stats.snapshot()
                log.info(summary_line(before, after))
                before = after

    @app.timer(interval=0.5)
    async def keep_time() -> None:
        rows = status.due_rows(now_ms())
        if rows:
            await _guarded("timekeeper", timekeeper.tick, rows)

    @app.timer(interval=15.0)
    async def observe() -> None:
        # only NO_ROUTE dead letters matter to the gauges; validating every row would be costly
        rows = [StatusRow.model_validate(raw) for raw in list(status.rows.values())
                if raw and raw.get("status") == "DEAD_LETTERED"
                and (raw.get("last_error") or {}).get("code") == "NO_ROUTE"]
        await _guarded("gauges", gauges.update, rows, len(status.rows))

    gauges = Gauges(names=names, kafka=kafka, router=router, metrics=metrics,
                    stale_after_ms=reach_settings.stale_no_route * 1000)
    app.service(RouterService)
    attach_views(app, router, metrics)
    app.reach_router = router  # type: ignore[attr-defined]  # (faust's own `app.router` routes table keys)
    app.reach_status = status  # type: ignore[attr-defined]
    return app




async def _guarded(what: str, fn: Callable[..., object], *args: object) -> None:
    """Run blocking periodic work in an executor; a failure is logged and retried next tick, because an
    exception escaping a faust timer stops the whole worker."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, fn, *args)
    except Exception:  # noqa: BLE001
        log.exception("%s failed; trying again next tick", what)
