"""Counting the demo's receipts: outcomes per capability, per instance and per kind of traffic (pure).

The traffic generator registers what it sent (`sent`), the receipts follower feeds every receipt
(`add`); the dashboard reads `snapshot()`. Like the status table, only the first terminal receipt of
a (message_id, generation) counts; later ones (a redelivery republishing its cached result) are ignored.
A request sent to a capability with a POLICY fallback ends, for its kind, with its fallback's child
(`<message_id>-fb<generation>`, docs/decisions/0034): the parent's own ending only hands it on.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from reach.core import fallback
from reach.records import Receipt, Status

OUTCOME_COLUMNS = ("routed", "completed", "failed", "retried", "dead_lettered", "overload", "rejected",
                   "unroutable", "expired", "canceled")
"""The counters shown per capability and in the totals, in display order."""

_TERMINAL_COLUMN = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.REJECTED: "rejected",
    Status.UNROUTABLE: "unroutable",
    Status.EXPIRED: "expired",
    Status.DEAD_LETTERED: "dead_lettered",
    Status.CANCELED: "canceled",
}


@dataclass(frozen=True)
class Sent:
    """What the generator published: the kind of traffic, when, its session, how it should end, and the POLICY
    fallback of its capability (its kind then ends with the fallback's child)."""

    kind: str
    created_at: int
    session_key: str | None = None
    expect: str | None = None
    fallback: str | None = None


@dataclass
class Row:
    """Counters and terminal latencies (created_at -> first terminal receipt, ms) of one capability or instance."""

    counts: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[int] = field(default_factory=list)

    def p(self, quantile: float) -> int | None:
        return percentile(self.latencies_ms, quantile)


@dataclass
class Fallback:
    """The requests handed to one fallback capability: the endings that handed them on, and how its children ended."""

    handed_on: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)


@dataclass
class Snapshot:
    """A consistent copy of the tally at one moment."""

    sent: int
    pending: int
    totals: Counter[str]
    by_capability: dict[str, Row]
    by_instance: dict[str, Row]
    by_kind: dict[str, Counter[str]]
    sent_by_kind: Counter[str]
    latencies_ms: list[int]
    completed_latencies_ms: list[int]
    sessions: dict[str, set[str]]
    examples: dict[str, str]
    as_planned: int
    unplanned: int
    fanout: dict[str, Counter[str]] = field(default_factory=dict)  # subscriber -> how its deliveries ended
    fallback: dict[str, Fallback] = field(default_factory=dict)  # fallback capability -> the requests it served


def percentile(values: list[int], quantile: float) -> int | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))]


def ending_of(receipt: Receipt) -> str:
    """How a message ended, for the by-kind view: its terminal status, or OVERLOAD for a shed request."""
    return "OVERLOAD" if outcome_of(receipt) == "overload" else receipt.status.value


def outcome_of(receipt: Receipt) -> str:
    """The counter a terminal receipt moves: FAILED with kind OVERLOAD is an overload, not a failure."""
    if receipt.status is Status.FAILED and receipt.error is not None and receipt.error.kind == "OVERLOAD":
        return "overload"
    return _TERMINAL_COLUMN[receipt.status]


def _label(capability: str) -> str:
    return capability or "(empty)"


class Tally:
    """Thread-safe counters over the receipts of one demo run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, Sent] = {}
        self._done: set[tuple[str, int]] = set()
        self._pending: set[str] = set()
        self._totals: Counter[str] = Counter()
        self._caps: dict[str, Row] = {}
        self._instances: dict[str, Row] = {}
        self._kinds: dict[str, Counter[str]] = {}
        self._sent_by_kind: Counter[str] = Counter()
        self._latencies: list[int] = []
        self._completed_latencies: list[int] = []
        self._sessions: dict[str, set[str]] = {}
        self._examples: dict[str, str] = {}
        self._as_planned = 0
        self._unplanned = 0
        self._fanout: dict[str, Counter[str]] = {}
        self._fallback: dict[str, Fallback] = {}

    def sent(self, message_id: str, item: Sent) -> None:
        """The generator published `message_id` (call before producing, so no receipt can come first)."""
        with self._lock:
            self._sent[message_id] = item
            self._pending.add(message_id)
            self._sent_by_kind[item.kind] += 1

    def add(self, receipt: Receipt) -> None:
        """Fold one receipt in."""
        with self._lock:
            cap = self._caps.setdefault(_label(receipt.capability), Row())
            status = receipt.status
            if status is Status.ROUTED:
                picked = (receipt.decision.picked_instance if receipt.decision else None) or receipt.instance_id
                self._count("routed", cap, picked)
                return
            if status is Status.RETRY_SCHEDULED:
                self._count("retried", cap, receipt.instance_id)
                return
            if status is Status.FANNED_OUT:  # the router's fan-out of an event, or the fold's note: a delivery ended
                self._examples.setdefault("fanned_out", receipt.message_id)
                for ended in (receipt.fanout.deliveries if receipt.fanout else []):
                    if ended.status is not None and ended.agent_id:
                        self._fanout.setdefault(ended.agent_id, Counter())[ended.status.value] += 1
                return
            if not status.is_terminal:
                return
            key = (receipt.message_id, receipt.generation)
            if key in self._done:
                return
            self._done.add(key)
            self._pending.discard(receipt.message_id)
            outcome = outcome_of(receipt)
            self._count(outcome, cap, receipt.instance_id)
            self._examples.setdefault(outcome, receipt.message_id)
            ending = ending_of(receipt)
            sent = self._sent.get(receipt.message_id)
            if sent is not None and sent.fallback and fallback.serves(status):
                self._handed_on(receipt, sent.fallback, ending)
                return
            if sent is None:
                sent = self._parent_sent(receipt.message_id)  # a fallback's child ends its parent's kind
                if sent is None:
                    return
                self._fallback.setdefault(sent.fallback or "", Fallback()).ended[ending] += 1
            self._kinds.setdefault(sent.kind, Counter())[ending] += 1
            if sent.expect is not None and ending == sent.expect:
                self._as_planned += 1
            elif sent.expect is not None:
                self._unplanned += 1
                self._examples.setdefault("unplanned", receipt.message_id)
            latency = max(0, receipt.at - sent.created_at)
            self._latencies.append(latency)
            cap.latencies_ms.append(latency)
            if receipt.instance_id:
                self._instances.setdefault(receipt.instance_id, Row()).latencies_ms.append(latency)
            if status is Status.COMPLETED:
                self._completed_latencies.append(latency)
                if receipt.attempt > 1:
                    self._examples.setdefault("completed_after_retry", receipt.message_id)
                if sent.session_key and receipt.instance_id:
                    self._sessions.setdefault(sent.session_key, set()).add(receipt.instance_id)

    def _handed_on(self, receipt: Receipt, to: str, ending: str) -> None:
        """A request with a fallback ended as the fallback serves: its kind waits for the child's ending."""
        self._fallback.setdefault(to, Fallback()).handed_on[ending] += 1
        self._examples.setdefault("fallback", receipt.message_id)
        child = fallback.child_id(receipt.message_id, receipt.generation)
        if (child, 0) not in self._done:  # a child that ended first (its receipt on a faster partition) is done
            self._pending.add(child)

    def _parent_sent(self, message_id: str) -> Sent | None:
        """What was sent for the parent of a fallback's child `<parent>-fb<generation>` (None for other messages)."""
        parent, marker, generation = message_id.rpartition("-fb")
        sent = self._sent.get(parent) if marker and generation.isdigit() else None
        return sent if sent is not None and sent.fallback else None

    def _count(self, column: str, cap: Row, instance_id: str | None) -> None:
        self._totals[column] += 1
        cap.counts[column] += 1
        if instance_id:
            self._instances.setdefault(instance_id, Row()).counts[column] += 1

    def pending(self) -> int:
        """Messages sent without a terminal receipt yet."""
        with self._lock:
            return len(self._pending)

    def snapshot(self) -> Snapshot:
        with self._lock:
            def copy(rows: dict[str, Row]) -> dict[str, Row]:
                return {k: Row(Counter(v.counts), list(v.latencies_ms)) for k, v in rows.items()}

            return Snapshot(
                sent=len(self._sent), pending=len(self._pending), totals=Counter(self._totals),
                by_capability=copy(self._caps), by_instance=copy(self._instances),
                by_kind={k: Counter(v) for k, v in self._kinds.items()}, sent_by_kind=Counter(self._sent_by_kind),
                latencies_ms=list(self._latencies), completed_latencies_ms=list(self._completed_latencies),
                sessions={k: set(v) for k, v in self._sessions.items()}, examples=dict(self._examples),
                as_planned=self._as_planned, unplanned=self._unplanned,
                fanout={k: Counter(v) for k, v in self._fanout.items()},
                fallback={k: Fallback(Counter(v.handed_on), Counter(v.ended)) for k, v in self._fallback.items()},
            )


class Rate:
    """Events per second over a sliding window of (time, running total) samples."""

    def __init__(self, window_s: float = 3.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def update(self, total: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        first_at, first_total = self._samples[0]
        return (total - first_total) / (now - first_at) if now > first_at else 0.0
