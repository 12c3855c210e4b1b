"""`reach intents ls|set|rm|stats`: the exact intent map on the control topic, and how intents were resolved."""

from __future__ import annotations

import json
import logging
import signal
import threading
from types import FrameType

import typer
from rich.table import Table

from reach.cli.common import console, operator_id
from reach.names import Names
from reach.ops import intents as ops_intents
from reach.settings import KafkaSettings, ReachSettings
from reach.timeparse import parse_time

app = typer.Typer(help="The exact intent -> capability map, and how intents were resolved.", no_args_is_help=True)
log = logging.getLogger("reach.resolver")


def _names() -> Names:
    return Names(ReachSettings().namespace)


@app.command("ls")
def ls(
    seeds: bool = typer.Option(True, "--seeds/--no-seeds", help="also list the phrases seeded from registrations"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Every exact mapping: the control topic's (operator, handoff; tenant *: all), each tenant's confidence its
    failed requests lowered (source feedback), and the seeds from live registrations."""
    rows = ops_intents.map_rows(_names(), KafkaSettings(), seeds=seeds)
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("phrase", "capability", "confidence", "source", "tenant")
    for r in rows:
        table.add_row(str(r["phrase"]), str(r["capability"]), f"{r['confidence']:.2f}", str(r["source"]),
                      r["tenant"] or "*")
    console.print(table)


@app.command("set")
def set_(
    phrase: str = typer.Argument(..., help="the intent phrase or intent id (normalised: case and spacing ignored)"),
    capability: str = typer.Argument(..., help="the capability that serves it"),
    confidence: float = typer.Option(1.0, "--confidence", help="0..1; below REACH_INTENT_EXACT_FLOOR it is unused"),
) -> None:
    """Map a phrase to a capability, live: resolvers apply it within one poll of the control topic."""
    record = ops_intents.set_mapping(phrase, capability, confidence=confidence, names=_names(),
                                      kafka=KafkaSettings(), by=operator_id(ReachSettings()))
    console.print(f"{record.key} -> {capability}", highlight=False)


@app.command("rm")
def rm(phrase: str = typer.Argument(..., help="the phrase to unmap")) -> None:
    """Remove a mapping (a tombstone on the control topic); a seed for the same phrase applies again."""
    key = ops_intents.remove_mapping(phrase, names=_names(), kafka=KafkaSettings(),
                                    by=operator_id(ReachSettings()))
    console.print(f"removed {key}", highlight=False)


@app.command("stats")
def stats(
    since: str | None = typer.Option(None, "--since", help="only receipts since, e.g. 1h, 30m or an ISO time"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The share of exact / semantic / fuzzy / dual / handoff resolutions and the success of each stage."""
    folded = ops_intents.read_stats(_names(), KafkaSettings(), parse_time(since))
    if as_json:
        console.print_json(json.dumps(folded.as_dict()))
        return
    table = Table("stage", "resolved", "share", "ended", "completed", "success", "by a human")
    for name, s in folded.stages.items():
        ok = s.success()
        table.add_row(name, str(s.resolved), f"{folded.share(name):.1%}", str(s.ended), str(s.completed),
                      "-" if ok is None else f"{ok:.1%}", str(s.human))
    console.print(table)
    console.print(f"{folded.total} intents resolved; {folded.policy_handoffs} request(s) no instance served handed "
                  "to a human by their policy (`reach policy set --handoff`)", highlight=False)


def run_resolver(interval: float) -> None:
    """`reach router --role resolve`: one resolver worker until SIGTERM / SIGINT, a summary line per interval."""
    from reach.intent.errors import ResolverIdInUse
    from reach.intent.stages import Thresholds
    from reach.kafka import clients
    from reach.settings import RedisSettings
    from reach.streams.resolver.resolve_loop import Resolver, ResolverSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    kafka = KafkaSettings()
    clients.check_reachable(clients.admin(kafka))
    worker = Resolver(kafka=kafka, reach=ReachSettings(), redis=RedisSettings(), thresholds=Thresholds(),
                      worker_id=ResolverSettings().id)
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker.start(ready_timeout=60)
    log.info("resolver %s ready (REACH_RESOLVER_ID; replies on %s): semantic stage %s", worker.worker_id,
             worker.reply_topic, "unavailable: " + worker.unavailable if worker.unavailable else "loaded")
    try:
        while not stop.wait(interval):
            if isinstance(worker.error, ResolverIdInUse):
                raise worker.error  # exit 2, saying who holds the id
            if not worker.healthy():
                raise typer.Exit(4)
            log.info("resolved %s; cache %d hits / %d misses", json.dumps(worker.counts, sort_keys=True),
                     worker.cache.hits, worker.cache.misses)
    finally:
        worker.stop()
