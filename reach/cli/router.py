"""`reach router`: run one routing worker and log a one-line summary per interval."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
from types import FrameType

import typer

from reach import traceexport
from reach.cli.common import check_redis_login
from reach.intent.unroutable import IntentHandoff
from reach.kafka import clients
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.router.stats import summary_line

log = logging.getLogger("reach.router")


def router(
    interval: float = typer.Option(10.0, "--interval", help="seconds between summary lines"),
    batch_size: int = typer.Option(500, "--batch-size", help="envelopes per consume batch"),
    use_faust: bool = typer.Option(True, "--faust/--no-faust",
                                   help="host the router in the faust app (web views on REACH_WEB_PORT); "
                                   "--no-faust runs the confluent loop alone"),
    role: str = typer.Option("all", "--role",
                             help="what this process runs: route (hot path, delay tiers), status (status fold, "
                             "timekeeper), all, or resolve (the intent resolver in front of the router, "
                             "docs/intent.md); run route and status as two processes so they share no GIL"),
) -> None:
    """Route every capability topic of the namespace to the best agent instance (several workers share them)."""
    from reach.streams.app import Role

    # a crash in native code (librdkafka, RocksDB) prints every thread's Python stack to stderr, not nothing
    faulthandler.enable(all_threads=True)
    traceexport.configure("reach-resolver" if role == "resolve" else "reach-router", os.environ)  # when OTEL_* asks
    if role == "resolve":
        from reach.cli.intents import run_resolver

        run_resolver(interval)
        return
    if role not in {r.value for r in Role}:
        raise typer.BadParameter(f"--role must be route, status or all; got {role!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    kafka, settings, redis = KafkaSettings(), ReachSettings(), RedisSettings()
    clients.check_reachable(clients.admin(kafka))
    check_redis_login(redis)
    if use_faust:
        import faust

        from reach.streams.app import build_app

        app = build_app(settings, kafka=kafka, redis=redis, batch_size=batch_size, summary_interval=interval,
                        role=Role(role))
        faust.Worker(app, loglevel="INFO").execute_from_commandline()
        return
    from reach.streams.router.route_loop import Router

    worker = Router(kafka=kafka, reach=settings, redis=redis, batch_size=batch_size, handoff=IntentHandoff())
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current batch", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker.start(ready_timeout=60)
    log.info("router ready: namespace %s, %d live instances", settings.namespace,
             len(worker.state.live(_now())))
    before = worker.stats.snapshot()
    try:
        while not stop.wait(interval):
            if not worker.healthy():
                raise typer.Exit(4)
            after = worker.stats.snapshot()
            log.info(summary_line(before, after))
            before = after
    finally:
        worker.stop()
        log.info(summary_line(before, worker.stats.snapshot()))


def _now() -> int:
    from reach.envelopes import now_ms

    return now_ms()
