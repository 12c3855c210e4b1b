"""The service level a knee-search step is held to, and the receipt book it is judged from.

A step passes when at least 99.9% of its round trips ended COMPLETED and the created_at -> COMPLETED
receipt p99 is at most 100 ms. Pure: the book folds receipts already decoded to dicts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.records import TERMINAL, Status
from reach.tooling.bench.results import Latency, latency

MIN_COMPLETED = 0.999
MAX_P99_MS = 100.0
CRITERION = f">= {MIN_COMPLETED:.1%} COMPLETED and created_at -> COMPLETED receipt p99 <= {MAX_P99_MS:g} ms"
_TERMINAL = frozenset(s.value for s in TERMINAL)


@dataclass
class ReceiptBook:
    """Per message id: first ROUTED and COMPLETED receipt `at`, first terminal status, repeated receipts."""

    routed: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    terminal: dict[str, str] = field(default_factory=dict)
    overload: set[str] = field(default_factory=set)  # ended FAILED with error kind OVERLOAD (shed)
    duplicated: int = 0  # second ROUTED / COMPLETED receipts of one message (at least once, counted)

    def add(self, receipts: Iterable[Mapping[str, Any]]) -> None:
        for receipt in receipts:
            mid, status = receipt["message_id"], receipt["status"]
            if status == Status.ROUTED.value:
                if mid in self.routed:
                    self.duplicated += 1
                else:
                    self.routed[mid] = receipt["at"]
            elif status == Status.COMPLETED.value:
                if mid in self.completed:
                    self.duplicated += 1
                else:
                    self.completed[mid] = receipt["at"]
            if status in _TERMINAL and mid not in self.terminal:
                self.terminal[mid] = status
                if status == Status.FAILED.value and (receipt.get("error") or {}).get("kind") == "OVERLOAD":
                    self.overload.add(mid)

    def missing(self, ids: Iterable[str]) -> set[str]:
        """The ids among `ids` without a terminal receipt yet."""
        return {m for m in ids if m not in self.terminal}


@dataclass(frozen=True)
class Verdict:
    """How one step's round trips ended, and whether that meets the criterion."""

    messages: int
    completed: int
    outcomes: dict[str, int]  # terminal status -> count (no entry: no terminal receipt)
    latency: Latency | None  # created_at -> COMPLETED receipt at
    passed: bool

    @property
    def completed_fraction(self) -> float:
        return self.completed / self.messages if self.messages else 0.0


def judge(book: ReceiptBook, created: Mapping[str, int]) -> Verdict:
    """Hold the messages of `created` (id -> created_at ms) to the criterion."""
    outcomes = Counter(book.terminal[m] for m in created if m in book.terminal)
    completed = {m: book.completed[m] - at for m, at in created.items()
                 if book.terminal.get(m) == Status.COMPLETED.value and m in book.completed}
    lat = latency(completed.values(), "created_at -> COMPLETED receipt at")
    return verdict(len(created), len(completed), dict(outcomes), lat)


def verdict(messages: int, completed: int, outcomes: dict[str, int], lat: Latency | None) -> Verdict:
    """The criterion applied to a step's counts and its completed requests' latency (a peer's replies too)."""
    passed = messages > 0 and completed >= MIN_COMPLETED * messages and lat is not None and lat.p99 <= MAX_P99_MS
    return Verdict(messages=messages, completed=completed, outcomes=outcomes, latency=lat, passed=passed)
