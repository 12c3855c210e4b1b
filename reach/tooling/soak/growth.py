"""The soak's growth criterion (pure): does a sampled series level off, or keep rising over the run's last half?

A least-squares line is fitted to the samples of the last half of the run. The series fails when that line rises,
across the last half, by more than its bound: `max(share x level, floor)`, where level is the median of the
last-half samples. A short run therefore only catches fast growth (90 s of a 3-minute run may rise 5% of a
router's RSS); a 60-minute run holds the same share to 30 minutes. Stores whose keys live a TTL (Redis, the
status table) rise until the first keys expire: they are judged only when the last half starts after their
horizon, and otherwise reported as not judged. docs/decisions/0039-soak-growth-criterion.md gives the reasons.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """What a series measures; each kind has one bound (BOUNDS)."""

    RSS = "rss_mib"
    FDS = "open_fds"
    REDIS_MEMORY = "redis_used_mib"
    REDIS_KEYS = "redis_keys"
    ROCKSDB = "rocksdb_mib"
    TOPICS = "topics"
    LAG = "consumer_lag"


@dataclass(frozen=True)
class Bound:
    """The rise a fitted line may show across the last half: `max(share x level, floor)`, in the series' unit."""

    share: float
    floor: float
    unit: str
    ttl_bound: bool = False  # keys that live a TTL: judged only when the last half starts past that horizon

    def allowed(self, level: float) -> float:
        return max(self.share * abs(level), self.floor)

    def text(self) -> str:
        ttl = ", judged past the TTL horizon" if self.ttl_bound else ""
        return f"{self.share:.0%} of the level or {self.floor:g} {self.unit}{ttl}"


BOUNDS: dict[Kind, Bound] = {
    Kind.RSS: Bound(share=0.05, floor=16.0, unit="MiB"),  # a fresh worker warms up for minutes
    Kind.FDS: Bound(share=0.10, floor=8.0, unit="fds"),
    Kind.REDIS_MEMORY: Bound(share=0.10, floor=4.0, unit="MiB", ttl_bound=True),
    Kind.REDIS_KEYS: Bound(share=0.10, floor=200.0, unit="keys", ttl_bound=True),
    Kind.ROCKSDB: Bound(share=0.10, floor=8.0, unit="MiB", ttl_bound=True),
    Kind.TOPICS: Bound(share=0.0, floor=0.5, unit="topics"),  # not one topic more
    Kind.LAG: Bound(share=0.0, floor=500.0, unit="messages"),  # a churn blip is fine, a trend is not
}
"""The registry of bounds; `reach soak --help` and docs/reliability.md print it (bounds_text)."""

COVERAGE = 0.8
"""A process's series is judged only when it was sampled over this share of the last half (a churned agent that
lives 2 minutes is shown, not judged)."""


def bounds_text() -> str:
    """Every bound in one line, as `reach soak --help` and docs/reliability.md show it."""
    return "; ".join(f"{k.value} {b.text()}" for k, b in BOUNDS.items())


@dataclass(frozen=True)
class Verdict:
    """One series' fit over the last half: its rise across that half, the bound, and whether it was judged."""

    name: str
    kind: Kind
    samples: int
    level: float | None
    rise: float | None
    allowed: float | None
    judged: bool
    why_not: str = ""

    @property
    def grows(self) -> bool:
        return self.judged and self.rise is not None and self.allowed is not None and self.rise > self.allowed

    def as_dict(self) -> dict[str, object]:
        return {"series": self.name, "kind": self.kind.value, "samples": self.samples, "level": _r(self.level),
                "rise": _r(self.rise), "allowed": _r(self.allowed), "judged": self.judged, "grows": self.grows,
                "why_not": self.why_not}


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (t, value) points; 0 for fewer than two distinct times."""
    if len(points) < 2:
        return 0.0
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var


def judge(name: str, kind: Kind, points: Sequence[tuple[float, float]], *, duration_s: float,
          ttl_s: float = 0.0) -> Verdict:
    """The verdict on one series sampled at (seconds since the start, value) over a run of `duration_s`."""
    half = duration_s / 2
    last = [(t, v) for t, v in points if t >= half]
    bound = BOUNDS[kind]
    level = statistics.median(v for _, v in last) if last else None
    if len(last) < 3:
        return Verdict(name, kind, len(last), level, None, None, False, "fewer than 3 samples in the last half")
    rise = slope(last) * half
    allowed = bound.allowed(level or 0.0)
    if points[0][0] >= half:  # started in the last half (a restart at its first second): its warm-up is not growth
        return Verdict(name, kind, len(last), level, rise, allowed, False, "started in the last half")
    if last[-1][0] - last[0][0] < COVERAGE * half:
        return Verdict(name, kind, len(last), level, rise, allowed, False, "not alive through the last half")
    if bound.ttl_bound and half < ttl_s:
        return Verdict(name, kind, len(last), level, rise, allowed, False,
                       f"the last half starts at {half:.0f} s, before the {ttl_s:.0f} s TTL horizon")
    return Verdict(name, kind, len(last), level, rise, allowed, True)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
