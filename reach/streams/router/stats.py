"""Routing counters per capability, and the one-line summary `reach router` logs."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

OUTCOMES = ("routed", "overload", "unavailable", "unroutable", "handed_off", "dead_lettered", "rejected", "expired",
            "bad_records", "superseded", "unfenced", "fanned_out")
"""`fanned_out`: an event of a subscribe capability sent on as one delivery per subscriber (reach.core.fanout; each
delivery is then counted as `routed` or its ending); `handed_off`: no route, and the capability's policy asks for a
human (reach.intent); `superseded`: a terminal the
router decided for a message that had already ended (it republished that first ending, reach.terminals);
`unfenced`: terminals it published without the fence because Redis was out."""
OTHER = "other"
"""Where counts go once `max_capabilities` distinct capabilities are counted (and for unserved ones)."""


@dataclass
class Snapshot:
    """Counters at one moment: totals per outcome and per (capability, outcome)."""

    at: float
    totals: Counter[str] = field(default_factory=Counter)
    by_capability: dict[str, Counter[str]] = field(default_factory=dict)


class RouterStats:
    """Written by the hot loop, read by the CLI and the web view."""

    def __init__(self, *, max_capabilities: int = 1_000) -> None:
        self._lock = threading.Lock()
        self._max = max_capabilities
        self._totals: Counter[str] = Counter()
        self._by_cap: dict[str, Counter[str]] = {}

    def count(self, capability: str, outcome: str, n: int = 1) -> None:
        with self._lock:
            self._totals[outcome] += n
            key = capability or OTHER
            if key not in self._by_cap and len(self._by_cap) >= self._max:
                key = OTHER  # bounded: request fields never grow the counters without end
            counts = self._by_cap.get(key)
            if counts is None:
                counts = self._by_cap[key] = Counter()
            counts[outcome] += n

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                time.monotonic(), Counter(self._totals), {k: Counter(v) for k, v in self._by_cap.items()}
            )


def summary_line(before: Snapshot, after: Snapshot) -> str:
    """`routed/s=.. routed=.. overload=.. unroutable=.. rejected=.. | cap: routed=..` for one interval."""
    seconds = max(after.at - before.at, 1e-9)
    delta = after.totals - before.totals
    head = f"routed/s={delta['routed'] / seconds:.1f} " + " ".join(f"{o}={delta[o]}" for o in OUTCOMES[1:])
    head = f"{head} routed={delta['routed']}"
    caps = []
    for cap, counts in sorted(after.by_capability.items()):
        d = counts - before.by_capability.get(cap, Counter())
        if d:
            caps.append(f"{cap}: " + ",".join(f"{o}={d[o]}" for o in OUTCOMES if d[o]))
    return head + (" | " + " | ".join(caps) if caps else "")
