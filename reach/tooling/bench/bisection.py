"""The knee search: bisect between a known-good and a known-bad offered rate for the highest rate that passes.

Pure: `search` takes a predicate over rates (in the bench, one open-loop step at that rate judged by
`reach.tooling.bench.slo`) and never touches a broker. The midpoint is geometric (sqrt(good x bad)), so the
search converges in relative terms: it stops when bad <= good x (1 + resolution), or when no whole
rate lies between them. When every tried rate failed the lower bound itself is tried (the knee may
lie below the range); when every one passed, the upper bound is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Knee:
    """The outcome of one search: the highest passing rate, the lowest failing one, and every rate tried."""

    knee: float | None  # highest rate that passed; None when even `low` failed
    failed_at: float | None  # lowest rate that failed; None when even `high` passed
    resolution: float  # the relative bracket the search stopped at (0.1: the knee is known within 10%)
    tried: tuple[tuple[float, bool], ...]  # (rate, passed) in the order they ran

    @property
    def bracket(self) -> str:
        """Where the true knee lies, in words a table can show."""
        if self.knee is None:
            return f"< {self.failed_at:g}"
        if self.failed_at is None:
            return f">= {self.knee:g}"
        return f"[{self.knee:g}, {self.failed_at:g})"


def search(passes: Callable[[float], bool], *, low: float, high: float, resolution: float = 0.1) -> Knee:
    """Bisect [low, high] (whole rates, low < high, resolution > 0) for the highest rate where `passes` holds."""
    if not 0 < low < high or resolution <= 0:
        raise ValueError(f"need 0 < low < high and resolution > 0; got low={low}, high={high}, resolution={resolution}")
    good, bad = float(low), float(high)
    tried: list[tuple[float, bool]] = []
    while bad > good * (1 + resolution):
        mid = float(round(math.sqrt(good * bad)))
        if mid <= good or mid >= bad:
            break  # no whole rate left between them
        ok = passes(mid)
        tried.append((mid, ok))
        if ok:
            good = mid
        else:
            bad = mid
    knee: float | None = good
    failed_at: float | None = bad
    if not any(ok for _, ok in tried):  # `low` is only assumed good: check it
        ok = passes(good)
        tried.append((good, ok))
        if not ok:
            knee, failed_at = None, good
    if not any(not ok for _, ok in tried):  # `high` is only assumed bad: check it
        ok = passes(bad)
        tried.append((bad, ok))
        if ok:
            knee, failed_at = bad, None
    return Knee(knee=knee, failed_at=failed_at, resolution=resolution, tried=tuple(tried))
