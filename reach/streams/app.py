"""The faust app hosting the router: worker lifecycle and web views; the hot path is reach.streams.router.

Built by `build_app(settings)`; nothing is created at import time. faust runs no agent on the
capability topics (it cannot subscribe by pattern, and its per-event path is ~25x below
confluent-kafka here, see docs/decisions/0001-router-hot-path.md): a faust Service starts the
confluent Router's threads when the worker starts and stops them when it stops.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from reach.envelopes import now_ms
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings
from reach.streams.router import Router
from reach.streams.stats import summary_line

log = logging.getLogger("reach.router")


def build_app(
    settings: ReachSettings | None = None,
    *,
    kafka: KafkaSettings | None = None,
    batch_size: int = 500,
    summary_interval: float = 10.0,
) -> Any:
    """A faust.App whose worker runs one Router; `app.reach_router` is that Router (usable without faust)."""
    import faust
    from mode import Service

    reach_settings: ReachSettings = settings or ReachSettings()
    kafka = kafka or KafkaSettings()
    names = Names(reach_settings.namespace)
    router = Router(kafka=kafka, reach=reach_settings, batch_size=batch_size)
    app = faust.App(
        names.router_app_id,
        broker=f"kafka://{kafka.servers()}",
        web_port=reach_settings.web_port,
        autodiscover=False,
        store="memory://",
        # a restarted worker must not wait out a killed one for faust's 60 s default before routing
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
    )

    class RouterService(Service):  # type: ignore[misc]
        """Starts the confluent hot path with the worker and stops it (last batch flushed) on shutdown."""

        async def on_start(self) -> None:
            await asyncio.get_running_loop().run_in_executor(None, lambda: router.start(ready_timeout=60))
            log.info("router ready: namespace %s", reach_settings.namespace)

        async def on_stop(self) -> None:
            await asyncio.get_running_loop().run_in_executor(None, router.stop)

        @Service.task
        async def _summaries(self) -> None:
            before = router.stats.snapshot()
            while not self.should_stop:
                await self.sleep(summary_interval)
                after = router.stats.snapshot()
                log.info(summary_line(before, after))
                before = after

    app.service(RouterService)
    app.reach_router = router  # type: ignore[attr-defined]  # (faust's own `app.router` routes table keys)

    @app.page("/router/")
    async def stats_view(web: Any, request: Any) -> Any:
        snap = router.stats.snapshot()
        return web.json({
            "healthy": router.healthy(),
            "totals": dict(snap.totals),
            "by_capability": {k: dict(v) for k, v in snap.by_capability.items()},
        })

    @app.page("/router/instances/")
    async def instances_view(web: Any, request: Any) -> Any:
        now = now_ms()
        live = router.state.live(now)
        loads = router.state.loads.loads(live)
        return web.json([
            {"instance_id": r.instance_id, "agent_id": r.agent_id, "region": r.region,
             "load": loads.get(r.instance_id, r.inflight), "max_concurrency": r.max_concurrency}
            for r in live
        ])

    return app
