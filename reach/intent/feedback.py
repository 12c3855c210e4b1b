"""Feedback from outcomes, pure: repeated failures of an exactly-mapped intent lower its mapping's confidence.

The resolver remembers which messages it sent on by an exact mapping (bounded, newest kept); their
terminal receipts count per (phrase, capability). `FAILURES` failed, expired or dead-lettered endings in a row lower the
mapping's confidence by `STEP` (a COMPLETED resets the run); once below the exact floor the mapping is
no longer used and the intent goes on to the semantic stage, so a wrong mapping stops costing requests.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from reach.records import Status

FAILURES = 3
STEP = 0.25
TRACKED = 10_000
# what the capability did: REJECTED (a bad payload) and UNROUTABLE (no instance for this tenant) are the
# caller's, and counting them would let any caller lower a mapping everyone uses
_BAD = frozenset({Status.FAILED, Status.EXPIRED, Status.DEAD_LETTERED})
_CALLERS = frozenset({Status.REJECTED, Status.UNROUTABLE, Status.CANCELED})


@dataclass(frozen=True)
class Lowered:
    """A mapping whose confidence the outcomes lowered: publish it as an INTENT record (source feedback)."""

    phrase: str
    capability: str
    confidence: float


class Feedback:
    """Exact-stage forwards awaiting their outcome, and the failure runs per mapping."""

    def __init__(self, *, failures: int = FAILURES, step: float = STEP, tracked: int = TRACKED) -> None:
        self._failures, self._step, self._tracked = failures, step, tracked
        self._pending: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self._runs: dict[tuple[str, str], int] = {}

    def watching(self, message_id: str) -> bool:
        return message_id in self._pending

    def sent(self, message_id: str, phrase: str, capability: str, confidence: float) -> None:
        self._pending[message_id] = (phrase, capability, confidence)
        while len(self._pending) > self._tracked:
            self._pending.popitem(last=False)

    def ended(self, message_id: str, status: Status) -> Lowered | None:
        """A terminal status of a watched message; a Lowered when this failure completes a run."""
        if not status.is_terminal:
            return None  # ROUTED, STARTED...: keep waiting for the ending
        found = self._pending.pop(message_id, None)
        if found is None:
            return None
        phrase, capability, confidence = found
        key = (phrase, capability)
        if status in _CALLERS:
            return None  # says nothing of the mapping either way: neither counts nor resets the run
        if status not in _BAD:
            self._runs.pop(key, None)
            return None
        run = self._runs.get(key, 0) + 1
        if run < self._failures:
            self._runs[key] = run
            return None
        self._runs.pop(key, None)
        return Lowered(phrase, capability, round(max(confidence - self._step, 0.0), 4))
