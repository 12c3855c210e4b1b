"""Waiting for a mode's outputs to reach the broker, sampling CPU when the warm-up is through and at the end."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reach.tooling.bench.results import Latency, ModeResult, latency, rate
from reach.tooling.bench.workspace import Workspace


@dataclass(frozen=True)
class Progress:
    """CPU seconds and output counts when the warm-up was through and when the run ended."""

    warm_cpu: float
    warm_count: int
    end_cpu: float
    end_count: int
    done: bool

    @property
    def cpu(self) -> float:
        return self.end_cpu - self.warm_cpu

    @property
    def measured(self) -> int:
        return self.end_count - self.warm_count


def wait_outputs(
    ws: Workspace,
    topic_names: Iterable[str],
    *,
    warmup: int,
    total: int,
    cpu: Callable[[], float],
    timeout: float,
    alive: Callable[[], bool] = lambda: True,
    start: dict[tuple[str, int], int] | None = None,
) -> Progress:
    """Poll the high watermarks of `topic_names` until they hold `total` records past `start` (or time out)."""
    names = list(topic_names)
    consumer = ws.consumer()
    try:
        warm: tuple[float, int] | None = None
        deadline = time.monotonic() + timeout
        count = 0
        while time.monotonic() < deadline and alive():
            count = sum(end - (start or {}).get(tp, 0) for tp, end in ws.end_offsets(names, consumer).items())
            if warm is None and count >= warmup:
                warm = (cpu(), count)
            if count >= total:
                break
            time.sleep(0.02)
        end = (cpu(), count)
        return Progress(*(warm or (end[0], 0)), *end, done=count >= total)
    finally:
        consumer.close()


def analyse_forwards(
    mode: str,
    outputs: Iterable[tuple[str, int]],
    created: dict[str, int],
    measured: set[str],
    *,
    basis: str,
) -> tuple[float, Latency | None, int, int]:
    """(throughput, latency, lost, duplicated) of the measured ids from (message_id, output timestamp) pairs.

    Throughput is measured ids over the span of their first outputs' broker timestamps; latency is
    output timestamp minus the envelope's created_at (one clock: every process runs on this machine)."""
    first: dict[str, int] = {}
    dup = 0
    for mid, ts in outputs:
        if mid not in measured:
            continue
        if mid in first:
            dup += 1
            continue
        first[mid] = ts
    lost = len(measured) - len(first)
    if not first:
        return 0.0, None, lost, dup
    stamps = first.values()
    throughput = rate(len(first), min(stamps), max(stamps))
    return throughput, latency((ts - created[mid] for mid, ts in first.items()), basis), lost, dup


def result(mode: str, progress: Progress, forwards: tuple[float, Latency | None, int, int], measured: int,
           *, notes: str = "") -> ModeResult:
    throughput, lat, lost, dup = forwards
    cpu = progress.cpu / progress.measured * 1000 if progress.measured > 0 else None
    return ModeResult(mode=mode, messages=measured, throughput=throughput, latency=lat, cpu_per_1k=cpu,
                      lost=lost, duplicated=dup, notes=notes)
