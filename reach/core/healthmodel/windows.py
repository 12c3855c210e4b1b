"""Rolling windows of one instance's calls, pure: per-bucket counts and the latest run times.

Buckets are `bucket_ms` wide and kept for `keep_ms` (the longest window); sums over any window,
optionally counting only calls at or after an instant (a rule's `since`), are a walk over at most
keep_ms / bucket_ms buckets. Percentiles come from the latest `samples` successful run times of the
last `latency_ms`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(slots=True)
class Bucket:
    """The calls that finished within one bucket."""

    start: int
    calls: int = 0
    ok: int = 0
    overloads: int = 0
    slow: int = 0


@dataclass(frozen=True, slots=True)
class Counts:
    """Sums over a window."""

    calls: int = 0
    ok: int = 0
    overloads: int = 0
    slow: int = 0

    @property
    def success(self) -> float | None:
        """ok / calls, None without calls."""
        return self.ok / self.calls if self.calls else None


class Windows:
    """One instance's buckets and latency samples."""

    def __init__(self, *, bucket_ms: int, keep_ms: int, samples: int, latency_ms: int) -> None:
        self.bucket_ms = bucket_ms
        self.keep_ms = keep_ms
        self.latency_ms = latency_ms
        self._buckets: deque[Bucket] = deque()
        self._latencies: deque[tuple[int, int]] = deque(maxlen=samples)

    def add(self, at: int, *, ok: bool, overload: bool = False, slow: bool = False, run_ms: int | None = None) -> None:
        """Count one call that finished at `at`; a call older than the newest bucket joins its own bucket."""
        start = at - at % self.bucket_ms
        bucket = self._bucket(start)
        bucket.calls += 1
        bucket.ok += ok
        bucket.overloads += overload
        bucket.slow += slow
        if ok and run_ms is not None:
            self._latencies.append((at, run_ms))

    def _bucket(self, start: int) -> Bucket:
        buckets = self._buckets
        if not buckets or buckets[-1].start < start:
            buckets.append(Bucket(start))
            return buckets[-1]
        for bucket in reversed(buckets):  # out of order (replay, clock skew): rare, walk back
            if bucket.start == start:
                return bucket
            if bucket.start < start:
                break
        found = Bucket(start)
        buckets.append(found)
        self._buckets = deque(sorted(buckets, key=lambda b: b.start))
        return found

    def expire(self, now: int) -> None:
        """Drop buckets older than keep_ms and samples older than latency_ms."""
        while self._buckets and self._buckets[0].start + self.bucket_ms <= now - self.keep_ms:
            self._buckets.popleft()
        while self._latencies and self._latencies[0][0] <= now - self.latency_ms:
            self._latencies.popleft()

    def clear(self) -> None:
        self._buckets.clear()
        self._latencies.clear()

    @property
    def empty(self) -> bool:
        return not self._buckets

    @property
    def last_call(self) -> int | None:
        return self._buckets[-1].start + self.bucket_ms if self._buckets else None

    def counts(self, now: int, window_ms: int, since: int | None = None) -> Counts:
        """Sums over the buckets that end within (now - window_ms, now] and start at or after `since` (a call in
        the bucket of a transition is left out rather than counted on the wrong side of it)."""
        lo = now - window_ms
        calls = ok = overloads = slow = 0
        for bucket in reversed(self._buckets):
            if bucket.start + self.bucket_ms <= lo or (since is not None and bucket.start < since):
                break
            calls += bucket.calls
            ok += bucket.ok
            overloads += bucket.overloads
            slow += bucket.slow
        return Counts(calls, ok, overloads, slow)

    def slices(self, now: int, width_ms: int, count: int, since: int | None = None) -> list[Counts]:
        """The last `count` complete windows of `width_ms` (aligned to multiples of it), oldest first; windows
        that start before `since` are left out (so the list may be shorter). One walk over their buckets."""
        end = now - now % width_ms
        lo = end - count * width_ms
        sums = [[0, 0, 0, 0] for _ in range(count)]
        for bucket in reversed(self._buckets):
            if bucket.start < lo:
                break
            if bucket.start >= end:
                continue
            acc = sums[(bucket.start - lo) // width_ms]
            acc[0] += bucket.calls
            acc[1] += bucket.ok
            acc[2] += bucket.overloads
            acc[3] += bucket.slow
        return [Counts(*acc) for i, acc in enumerate(sums) if since is None or lo + i * width_ms >= since]

    def percentiles(self, *qs: float) -> list[float | None]:
        """Nearest-rank percentiles (0 < q <= 1) of the kept run times; None without samples."""
        values = sorted(ms for _, ms in self._latencies)
        if not values:
            return [None for _ in qs]
        return [float(values[max(0, math.ceil(q * len(values)) - 1)]) for q in qs]


class CapabilityLatency:
    """Run times of one capability across all instances, for the default slow threshold (x its p50)."""

    def __init__(self, *, samples: int, latency_ms: int, refresh_ms: int = 1_000) -> None:
        self._samples: deque[tuple[int, int]] = deque(maxlen=samples)
        self._latency_ms = latency_ms
        self._refresh_ms = refresh_ms
        self._p50: float | None = None
        self._at = -refresh_ms

    def add(self, at: int, run_ms: int) -> None:
        self._samples.append((at, run_ms))

    def p50(self, now: int) -> float | None:
        """The median of the last latency_ms, recomputed at most every refresh_ms."""
        if now - self._at >= self._refresh_ms:
            while self._samples and self._samples[0][0] <= now - self._latency_ms:
                self._samples.popleft()
            values = sorted(ms for _, ms in self._samples)
            self._p50 = float(values[(len(values) - 1) // 2]) if values else None
            self._at = now
        return self._p50
