"""One `reach bench` run: every mode in one namespace, one after the other, on the same broker and machine."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from reach.settings import KafkaSettings
from reach.tooling.bench import faust_forward, gateway, idle, intent, knee, peers, quix, raw, round_trip, route, scoring
from reach.tooling.bench import publish as publish_mode
from reach.tooling.bench import scaleout as scaleout_mode
from reach.tooling.bench.gateway import GatewayConfig
from reach.tooling.bench.knee import KneeConfig
from reach.tooling.bench.peers import PeersConfig
from reach.tooling.bench.report import Report, conditions
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.workspace import Workspace

MODES = ("idle", "raw", "faust", "quix", "route", "roundtrip", "knee", "peers", "status-scale", "scoring", "gateway",
         "intent", "publish", "scaleout")
STATUS_SCALE = "reach.tooling.bench.status_scale"
"""The status table's scale run comes with the status engine: `status_scale(*, messages, kafka, topics_file)`
returning a record whose `as_dict()` holds messages, rows, receipts_per_s, fold_rss_mib, disk_mib, recovery_s,
recovered_rows (and more, all kept in the JSON)."""


@dataclass(frozen=True)
class BenchConfig:
    """Counts and rates; `quick()` shrinks everything for the smoke test."""

    messages: int = 20_000
    warmup: int = 2_000
    rates: tuple[float, ...] = (200.0, 1_000.0)  # no-op agent
    echo_rates: tuple[float, ...] = (100.0, 300.0)  # two examples/echo_agent.py instances
    split_router: bool = True  # the no-op rates again with `reach router --role route` and `--role status` apart
    rates_split: tuple[float, ...] | None = None  # the split run's rates (None: the same as `rates`)
    rate_seconds: float = 10.0
    idle_seconds: float = 30.0  # the idle row: the stack measured without traffic,
    idle_settle: float = 10.0  # after this long for its start-up to finish
    scoring_calls: int = 2_000
    batch_size: int = 500
    route_workers: tuple[int, ...] = (1, 2)
    status_messages: int = 500_000  # x 4 receipts each
    modes: tuple[str, ...] = MODES
    topics_file: Path = field(default_factory=lambda: Path("topics.yaml"))
    knee: KneeConfig = field(default_factory=KneeConfig)
    peers: PeersConfig = field(default_factory=PeersConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    scaleout: scaleout_mode.ScaleoutConfig = field(default_factory=scaleout_mode.ScaleoutConfig)

    @classmethod
    def quick(cls, **changes: object) -> BenchConfig:
        base = {"messages": 300, "warmup": 50, "rates": (50.0, 200.0), "echo_rates": (), "rates_split": (50.0,),
                "rate_seconds": 1.0, "idle_seconds": 1.0, "idle_settle": 0.5, "scoring_calls": 100,
                "knee": KneeConfig.quick(), "peers": PeersConfig.quick(), "status_messages": 2_000,
                "gateway": GatewayConfig.quick(), "scaleout": scaleout_mode.ScaleoutConfig.quick()}
        return cls(**{**base, **changes})  # type: ignore[arg-type]


def run(config: BenchConfig, *, kafka: KafkaSettings | None = None,
        progress: Callable[[str], None] = lambda _msg: None) -> Report:
    """Run the configured modes side by side; the workspace's topics are deleted afterwards."""
    logging.getLogger("reach").setLevel(logging.WARNING)
    started = time.monotonic()
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    results: list[ModeResult] = []
    searches: list[knee.Search] = []
    try:
        steps: list[tuple[str, Callable[[], list[ModeResult]]]] = [
            ("idle", lambda: [_idle(config, kafka)]),
            ("raw", lambda: [raw.run(ws, messages=config.messages, warmup=config.warmup)]),
            ("faust", lambda: [faust_forward.run(ws, messages=config.messages, warmup=config.warmup)]),
            ("quix", lambda: [quix.run(ws, messages=config.messages, warmup=config.warmup)]),
            ("route", lambda: [route.run(ws, messages=config.messages, warmup=config.warmup,
                                         batch_size=config.batch_size, workers=n) for n in config.route_workers]),
            ("roundtrip", lambda: _round_trip(config, kafka)),
            ("knee", lambda: _knee(config, kafka, searches)),
            ("peers", lambda: _peers(config, kafka, searches)),
            ("status-scale", lambda: _status_scale(config, kafka)),
            ("scoring", lambda: scoring.run(calls=config.scoring_calls)),
            ("gateway", lambda: _gateway(config, kafka)),
            ("intent", lambda: intent.run()),
            ("publish", lambda: _publish(config, kafka)),
            ("scaleout", lambda: scaleout_mode.run(config.scaleout, kafka=kafka, topics_file=config.topics_file)),
        ]
        for name, step in steps:
            if name in config.modes:
                progress(f"{name} ...")
                t = time.monotonic()
                results.extend(step())
                progress(f"{name} done in {time.monotonic() - t:.0f}s")
    finally:
        ws.delete()
    knee_conf = {f"knee_{k}": v for k, v in asdict(config.knee).items()}
    return Report(results, knees=searches, conditions=conditions(
        namespace=ws.namespace, messages=config.messages, warmup=config.warmup, rates=list(config.rates),
        echo_rates=list(config.echo_rates),
        rate_seconds=config.rate_seconds, idle_seconds=config.idle_seconds, batch_size=config.batch_size,
        route_workers=list(config.route_workers),
        status_messages=config.status_messages, **knee_conf,
        gateway_rates=list(config.gateway.rates), gateway_seconds=config.gateway.seconds,
        gateway_generators=config.gateway.generators, peers=list(config.peers.peers), peers_high=config.peers.high,
        peers_workers=config.peers.workers, scaleout_rate=config.scaleout.rate,
        scaleout_seconds=config.scaleout.seconds, scaleout_routers=list(config.scaleout.routers),
        seconds=round(time.monotonic() - started)))


def _round_trip(config: BenchConfig, kafka: KafkaSettings | None) -> list[ModeResult]:
    """In a namespace of its own: the route mode leaves ~20k ROUTED-but-never-started envelopes behind,
    which the stream app would otherwise fold, reroute and expire during the measured round trip."""
    out = []
    runs: list[tuple[round_trip.Setup, tuple[float, ...], tuple[str, ...]]] = [
        (round_trip.NOOP, config.rates, round_trip.ROLES_ALL),
        (round_trip.ECHO, config.echo_rates, round_trip.ROLES_ALL)]
    if config.split_router:
        runs.append((round_trip.NOOP, config.rates if config.rates_split is None else config.rates_split,
                     round_trip.ROLES_SPLIT))
    for setup, rates, roles in runs:
        if not rates:
            continue
        why = setup.missing() or (None if roles == round_trip.ROLES_ALL or round_trip.roles_supported()
                                  else "not available on this build (reach router has no --role)")
        if why:
            out.append(ModeResult.skip(round_trip.mode_name(setup, rates[0], roles), why))
            continue
        ws = Workspace(kafka=kafka, topics_file=config.topics_file)
        try:
            out.extend(round_trip.run(ws, rates=list(rates), seconds=config.rate_seconds, setup=setup, roles=roles))
        finally:
            ws.delete()
    return out


def _idle(config: BenchConfig, kafka: KafkaSettings | None) -> ModeResult:
    """First, on a quiet machine, in a namespace of its own."""
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    try:
        return idle.run(ws, seconds=config.idle_seconds, settle=config.idle_settle)
    finally:
        ws.delete()


def _gateway(config: BenchConfig, kafka: KafkaSettings | None) -> list[ModeResult]:
    """In a namespace of its own: its agent, app and gateway see none of the other modes' records."""
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    try:
        return gateway.run(ws, config.gateway)
    finally:
        ws.delete()


def _publish(config: BenchConfig, kafka: KafkaSettings | None) -> list[ModeResult]:
    """In a namespace of its own: the SDK's publishers and the plain producer write to one capability topic."""
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    try:
        return publish_mode.run(ws, messages=config.messages, warmup=config.warmup)
    finally:
        ws.delete()


def _knee(config: BenchConfig, kafka: KafkaSettings | None, searches: list[knee.Search]) -> list[ModeResult]:
    """In a namespace of its own, like the round trip."""
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    try:
        searches.extend(knee.run(ws, config.knee))
    finally:
        ws.delete()
    return [s.row() for s in searches]


def _peers(config: BenchConfig, kafka: KafkaSettings | None, searches: list[knee.Search]) -> list[ModeResult]:
    """Reach's no-op knee (the knee mode's, when it ran in this run) and each peer's, in namespaces of their own."""
    rows: list[ModeResult] = []
    if not any(s.setup == peers.REACH and s.runs for s in searches):
        ws = Workspace(kafka=kafka, topics_file=config.topics_file)
        try:
            reach = knee.run(ws, replace(config.knee, setups=(peers.REACH,)))
        finally:
            ws.delete()
        searches.extend(reach)
        rows.extend(s.row() for s in reach)
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    try:
        found = peers.run(ws, config.knee, config.peers)
    finally:
        ws.delete()
    searches.extend(found)
    return rows + [s.row() for s in found]


def _status_scale(config: BenchConfig, kafka: KafkaSettings | None) -> list[ModeResult]:
    """The hook for the status engine's own scale run; a build without it says so instead of measuring."""
    try:
        module = importlib.import_module(STATUS_SCALE)
    except ModuleNotFoundError as exc:
        if exc.name != STATUS_SCALE:
            raise
        return [ModeResult.skip("status-scale", f"not available on this build ({STATUS_SCALE} is not installed)")]
    measured = module.status_scale(messages=config.status_messages, kafka=kafka, topics_file=config.topics_file)
    return [status_row(measured.as_dict())]


def status_row(figures: dict[str, Any]) -> ModeResult:
    """The status-scale run as a table row: receipts/s as its rate; a row missing after recovery is lost."""
    messages = int(figures.get("messages") or 0)
    kept = min(int(figures.get("rows") or 0), int(figures.get("recovered_rows") or 0))
    numbers = {k: float(v) for k, v in figures.items() if isinstance(v, int | float)}
    numbers["rss_mib"] = numbers.get("fold_rss_mib", numbers.get("rss_mib", 0.0))
    shown: dict[str, float | None] = dict(numbers)
    return ModeResult(
        mode="status-scale", messages=messages, throughput=numbers.get("receipts_per_s", 0.0), latency=None,
        cpu_per_1k=None, lost=max(messages - kept, 0), duplicated=0, figures=shown,
        notes=(f"{int(numbers.get('receipts', 0)):,} receipts folded at {numbers.get('receipts_per_s', 0):,.0f}/s, "
               f"RSS {numbers['rss_mib']:,.0f} MiB, {numbers.get('disk_mib', 0):,.0f} MiB on disk; "
               f"a fresh worker recovered {int(numbers.get('recovered_rows', 0)):,} rows in "
               f"{numbers.get('recovery_s', 0):.1f} s"),
    )
