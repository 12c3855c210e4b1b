"""Observed cost per successful call, per instance, over a rolling window: what the `cost` scoring factor prefers to
an instance's declared cost (reach.core.factors). Pure: the router's state feeds it COMPLETED receipts' usage.

Only COMPLETED calls whose usage names a cost count (a failure's cost is not what a success costs; a call that reports
no cost says nothing about its price). The window is the last WINDOW_MS of receipts and at most MAX_SAMPLES calls per
instance; an instance with fewer than MIN_SAMPLES calls in it has no observed cost (one call is noise), nor one whose
calls all left the window. `means` is read by the routing thread while the feed's thread writes it: a key is
replaced or removed whole, never iterated by the reader. docs/decisions/0043-mcp-bridge-budgets-and-measured-cost.md."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

WINDOW_MS = 5 * 60_000
MAX_SAMPLES = 200
MIN_SAMPLES = 3
SWEEP_EVERY_MS = 10_000


class CostBook:
    """Rolling cost samples per instance and their means (micro-units of the currency per successful call)."""

    def __init__(self, *, window_ms: int = WINDOW_MS, max_samples: int = MAX_SAMPLES,
                 min_samples: int = MIN_SAMPLES) -> None:
        self._window_ms = window_ms
        self._max = max_samples
        self._min = min_samples
        self._samples: dict[str, deque[tuple[int, int]]] = {}
        self._sums: dict[str, int] = {}
        self._swept_at = 0
        self.means: Mapping[str, float] = {}
        """instance_id -> observed mean cost per successful call (micro-units), where observed."""
        self._means: dict[str, float] = self.means  # type: ignore[assignment]  # the same dict, written here

    def add(self, instance_id: str, at: int, cost_micros: int) -> None:
        """One COMPLETED call's cost."""
        if cost_micros < 0:
            return
        samples = self._samples.setdefault(instance_id, deque())
        samples.append((at, cost_micros))
        self._sums[instance_id] = self._sums.get(instance_id, 0) + cost_micros
        if len(samples) > self._max:
            self._sums[instance_id] -= samples.popleft()[1]
        self._prune(instance_id, at)
        if at - self._swept_at >= SWEEP_EVERY_MS:
            self.sweep(at)

    def sweep(self, now: int) -> None:
        """Drop what left the window for every instance (an instance nobody calls any more loses its mean)."""
        self._swept_at = now
        for instance_id in list(self._samples):
            self._prune(instance_id, now)

    def forget(self, instance_id: str) -> None:
        self._samples.pop(instance_id, None)
        self._sums.pop(instance_id, None)
        self._means.pop(instance_id, None)

    def _prune(self, instance_id: str, now: int) -> None:
        samples = self._samples[instance_id]
        while samples and samples[0][0] <= now - self._window_ms:
            self._sums[instance_id] -= samples.popleft()[1]
        if len(samples) >= self._min:
            self._means[instance_id] = self._sums[instance_id] / len(samples)
        else:
            self._means.pop(instance_id, None)
            if not samples:
                del self._samples[instance_id]
                del self._sums[instance_id]
