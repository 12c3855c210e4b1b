"""What one benchmark mode reports (throughput, latency percentiles, CPU, lost/duplicated) and how it is measured."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Latency:
    """Percentiles in milliseconds of one observable step; `basis` says from what to what."""

    basis: str
    count: int
    p50: float
    p95: float
    p99: float
    max: float


@dataclass
class ModeResult:
    """One row of the table: a mode (or one offered rate of the round trip) measured for `messages`."""

    mode: str
    messages: int
    throughput: float  # messages (or calls) per second
    latency: Latency | None
    cpu_per_1k: float | None  # CPU seconds per 1,000 messages, every process doing the mode's work
    lost: int
    duplicated: int
    offered_rate: float | None = None
    unfinished: int = 0  # no terminal status within the mode's drain window (lost only if never)
    steps: dict[str, Latency] = field(default_factory=dict)  # extra observable steps (router hop, receipts)
    cpu_by_process: dict[str, float | None] = field(default_factory=dict)  # CPU s / 1k per process; None = n/a
    skipped: str | None = None  # why the mode measured nothing (never a number in its place)
    figures: dict[str, float | None] = field(default_factory=dict)  # mode-specific figures (status-scale's)
    notes: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def skip(cls, mode: str, why: str) -> ModeResult:
        """A row that says why it has no figures."""
        return cls(mode=mode, messages=0, throughput=0.0, latency=None, cpu_per_1k=None, lost=0, duplicated=0,
                   skipped=why, notes=f"skipped: {why}")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(int(-(-q * len(sorted_values) // 100)), 1)  # ceil(q/100 * n), at least the first
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def latency(values_ms: Iterable[float], basis: str) -> Latency | None:
    """Percentiles of `values_ms`, None when there is nothing to summarise."""
    ordered = sorted(values_ms)
    if not ordered:
        return None
    return Latency(basis, len(ordered), percentile(ordered, 50), percentile(ordered, 95),
                   percentile(ordered, 99), float(ordered[-1]))


def rate(count: int, first_ms: float, last_ms: float) -> float:
    """Messages per second over a window of broker timestamps (at least 1 ms wide)."""
    return count / (max(last_ms - first_ms, 1.0) / 1000.0)


def own_cpu() -> float:
    """CPU seconds (user + system) this process has used, all threads."""
    t = os.times()
    return t.user + t.system


def process_cpu(pid: int) -> float:
    """CPU seconds (utime + stime) of another process, from /proc/<pid>/stat; 0.0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / _TICKS  # fields 14 and 15 of proc(5), after pid and comm


def per_1k(cpu_seconds: float, messages: int) -> float | None:
    return cpu_seconds / messages * 1000 if messages > 0 else None
