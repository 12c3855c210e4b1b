"""One `reach bench` run: every mode in one namespace, one after the other, on the same broker and machine."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reach.bench import faust_forward, raw, round_trip, route, scoring
from reach.bench.report import Report, conditions
from reach.bench.results import ModeResult
from reach.bench.workspace import Workspace
from reach.settings import KafkaSettings

MODES = ("raw", "faust", "route", "roundtrip", "scoring")


@dataclass(frozen=True)
class BenchConfig:
    """Counts and rates; `quick()` shrinks everything for the smoke test."""

    messages: int = 20_000
    warmup: int = 2_000
    rates: tuple[float, ...] = (500.0, 2_000.0, 5_000.0)
    rate_seconds: float = 5.0
    scoring_calls: int = 2_000
    batch_size: int = 500
    modes: tuple[str, ...] = MODES
    topics_file: Path = field(default_factory=lambda: Path("topics.yaml"))

    @classmethod
    def quick(cls, **changes: object) -> BenchConfig:
        base = {"messages": 300, "warmup": 50, "rates": (50.0, 200.0), "rate_seconds": 1.0, "scoring_calls": 100}
        return cls(**{**base, **changes})  # type: ignore[arg-type]


def run(config: BenchConfig, *, kafka: KafkaSettings | None = None,
        progress: Callable[[str], None] = lambda _msg: None) -> Report:
    """Run the configured modes side by side; the workspace's topics are deleted afterwards."""
    logging.getLogger("reach").setLevel(logging.WARNING)
    started = time.monotonic()
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    results: list[ModeResult] = []
    try:
        steps: list[tuple[str, Callable[[], list[ModeResult]]]] = [
            ("raw", lambda: [raw.run(ws, messages=config.messages, warmup=config.warmup)]),
            ("faust", lambda: [faust_forward.run(ws, messages=config.messages, warmup=config.warmup)]),
            ("route", lambda: [route.run(ws, messages=config.messages, warmup=config.warmup,
                                         batch_size=config.batch_size)]),
            ("roundtrip", lambda: _round_trip(config, kafka)),
            ("scoring", lambda: scoring.run(calls=config.scoring_calls)),
        ]
        for name, step in steps:
            if name in config.modes:
                progress(f"{name} ...")
                t = time.monotonic()
                results.extend(step())
                progress(f"{name} done in {time.monotonic() - t:.0f}s")
    finally:
        ws.delete()
    return Report(results, conditions(namespace=ws.namespace, messages=config.messages, warmup=config.warmup,
                                      rates=list(config.rates), rate_seconds=config.rate_seconds,
                                      batch_size=config.batch_size, seconds=round(time.monotonic() - started)))


def _round_trip(config: BenchConfig, kafka: KafkaSettings | None) -> list[ModeResult]:
    """In a namespace of its own: the route mode leaves ~20k ROUTED-but-never-started envelopes behind,
    which the stream app would otherwise fold, reroute and expire during the measured round trip."""
    ws = Workspace(kafka=kafka, topics_file=config.topics_file)
    try:
        return round_trip.run(ws, rates=list(config.rates), seconds=config.rate_seconds)
    finally:
        ws.delete()
