"""The fault suite's checker: what a receipt log and a side-effect ledger say was lost, run twice or ended twice."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

TERMINAL = frozenset({"COMPLETED", "FAILED", "REJECTED", "UNROUTABLE", "EXPIRED", "DEAD_LETTERED"})
"""Mirrors reach.records.TERMINAL by name: the checker reads plain values and imports no record types."""


EXAMPLES = 5  # message ids kept per finding, to look them up with `reach trace` or in the run's receipt dump


@dataclass(frozen=True)
class Sent:
    """One message the traffic generator produced: when, and whether the broker acknowledged it."""

    message_id: str
    sent_ms: int
    acked: bool


@dataclass(frozen=True)
class Seen:
    """One receipt as the checker needs it; `outcome` tells terminal receipts apart (e.g. a hash of the result)."""

    message_id: str
    generation: int
    status: str
    at_ms: int
    outcome: str = ""


@dataclass(frozen=True)
class Window:
    """When the fault was injected and when it ended (epoch ms; equal for an instantaneous fault)."""

    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Figures:
    """A scenario's result, named as `reach faults run --json` prints it."""

    sent: int
    acked: int
    terminal: int
    lost: int
    double_side_effects: int
    double_terminal: int
    late_terminal: int
    in_flight: int
    recovery_s: float | None
    drained_s: float | None
    p99_ms: float | None
    p99_during_ms: float | None
    p99_after_ms: float | None
    outcomes: dict[str, int]
    examples: dict[str, list[str]]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(sent: Iterable[Sent], receipts: Iterable[Seen], ledger: Iterable[tuple[str, int]],
          window: Window) -> Figures:
    """The figures of one scenario.

    - lost: acknowledged, yet no terminal receipt for any generation;
    - double_side_effects: (message, generation) pairs the ledger holds more than once;
    - double_terminal: pairs with two *different* terminal outcomes; late_terminal: pairs whose terminal
      receipt was repeated identically (a redelivered cached result), counted apart;
    - in_flight: messages STARTED before the fault began whose first terminal came after it (the handlers a
      fault inside an agent can repeat);
    - recovery_s: fault end -> first COMPLETED of a message sent after it; drained_s: fault end -> the last
      message sent before the fault ended has its terminal receipt;
    - p99 of send -> first terminal, over all messages, those sent during the fault, those sent after it."""
    sends = {s.message_id: s for s in sent}
    first_terminal: dict[str, Seen] = {}
    outcomes: dict[tuple[str, int], Counter[tuple[str, str]]] = defaultdict(Counter)
    started_before: set[str] = set()
    for seen in sorted(receipts, key=lambda r: r.at_ms):
        if seen.status == "STARTED" and seen.at_ms <= window.start_ms:
            started_before.add(seen.message_id)
        if seen.status not in TERMINAL:
            continue
        outcomes[(seen.message_id, seen.generation)][(seen.status, seen.outcome)] += 1
        first_terminal.setdefault(seen.message_id, seen)
    acked = [s for s in sends.values() if s.acked]
    ends = [first_terminal[s.message_id] for s in sends.values() if s.message_id in first_terminal]
    effects = Counter(ledger)
    latency = {m: first_terminal[m].at_ms - s.sent_ms for m, s in sends.items() if m in first_terminal}
    lost = [s.message_id for s in acked if s.message_id not in first_terminal]
    doubled = [m for (m, _), n in effects.items() if n > 1 and m in sends]
    double_terminal = [m for (m, _), c in outcomes.items() if len(c) > 1 and m in sends]
    late = [m for (m, _), c in outcomes.items() if len(c) == 1 and sum(c.values()) > 1 and m in sends]
    return Figures(
        sent=len(sends),
        acked=len(acked),
        terminal=len(ends),
        lost=len(lost),
        double_side_effects=len(doubled),
        double_terminal=len(double_terminal),
        late_terminal=len(late),
        in_flight=sum(1 for m in started_before if m in sends
                      and (m not in first_terminal or first_terminal[m].at_ms > window.start_ms)),
        recovery_s=_recovery(sends, receipts_after=ends, window=window),
        drained_s=_drained(sends, first_terminal, window),
        p99_ms=_p99(latency.values()),
        p99_during_ms=_p99(v for m, v in latency.items() if window.start_ms <= sends[m].sent_ms <= window.end_ms),
        p99_after_ms=_p99(v for m, v in latency.items() if sends[m].sent_ms > window.end_ms),
        outcomes=dict(Counter(e.status if e.status == "COMPLETED" else f"{e.status}:{e.outcome}" for e in ends)),
        examples={k: v[:EXAMPLES] for k, v in (("lost", lost), ("double_side_effects", doubled),
                                               ("double_terminal", double_terminal), ("late_terminal", late)) if v},
    )


def _recovery(sends: dict[str, Sent], *, receipts_after: list[Seen], window: Window) -> float | None:
    firsts = [r.at_ms for r in receipts_after
              if r.status == "COMPLETED" and sends[r.message_id].sent_ms >= window.end_ms]
    return round((min(firsts) - window.end_ms) / 1000, 2) if firsts else None


def _drained(sends: dict[str, Sent], first_terminal: dict[str, Seen], window: Window) -> float | None:
    before = [s for s in sends.values() if s.acked and s.sent_ms <= window.end_ms]
    if not before or any(s.message_id not in first_terminal for s in before):
        return None  # never drained: what is missing is counted as lost
    last = max(first_terminal[s.message_id].at_ms for s in before)
    return round(max(0, last - window.end_ms) / 1000, 2)


def _p99(values: Iterable[int]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return float(ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)])


def parse_ledger(lines: Iterable[str]) -> list[tuple[str, int]]:
    """`<message_id> <generation> [<instance>]` per executed handler call; a torn last line is skipped."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            out.append((parts[0], int(parts[1])))
    return out
