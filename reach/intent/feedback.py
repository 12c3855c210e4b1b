"""Feedback from outcomes, pure: repeated failures of an exactly-mapped intent lower its mapping's confidence for
the tenant whose requests failed.

The resolver remembers which messages it sent on by an exact mapping (bounded, newest kept); their terminal
receipts count per (tenant, phrase, capability). `FAILURES` endings in a row that the mapped agent caused lower
that tenant's confidence by `STEP` (a COMPLETED resets the run); once below the exact floor the mapping is no
longer used for that tenant and its intents go on to the semantic stage, so a wrong mapping stops costing requests.

Only what the agent did counts (`blame`): an ending the caller caused says nothing of the mapping and neither
counts nor resets a run. Otherwise any caller could wear down a mapping with requests bound to end badly, such as
`budget_ms: 1` (EXPIRED), a cancel, or an execution timeout shorter than the agent needs. The learned confidence
is the tenant's own (an INTENT_FEEDBACK record, docs/decisions/0026 addendum): the operator's mapping stays as it is.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from reach.records import ErrorInfo, Status

FAILURES = 3
STEP = 0.25
TRACKED = 10_000
Blame = Literal["agent", "caller", "success"]
# the caller's doing: a bad payload (REJECTED), no instance for its tenant (UNROUTABLE), its cancel, its budget
# (EXPIRED: the budget ran out, however small the caller made it)
_CALLERS = frozenset({Status.REJECTED, Status.UNROUTABLE, Status.CANCELED, Status.EXPIRED})
_AGENTS = frozenset({Status.FAILED, Status.DEAD_LETTERED})


def blame(status: Status, error: ErrorInfo | None, *, caller_timeout: bool) -> Blame | None:
    """Who a terminal status is down to; None for a status that is not an ending. A failure whose error is the
    budget's (kind BUDGET), or a timeout when the caller asked its own execution timeout (`caller_timeout`: it may
    be what cut the run), is the caller's."""
    if status is Status.COMPLETED:
        return "success"
    if status in _CALLERS:
        return "caller"
    if status not in _AGENTS:
        return None
    kind = error.kind if error is not None else ""
    if kind == "BUDGET" or (kind == "TIMEOUT" and caller_timeout):
        return "caller"
    return "agent"


@dataclass(frozen=True)
class Lowered:
    """A mapping whose confidence one tenant's outcomes lowered: publish it as that tenant's INTENT_FEEDBACK record."""

    tenant: str
    phrase: str
    capability: str
    confidence: float


@dataclass(frozen=True)
class _Sent:
    tenant: str
    phrase: str
    capability: str
    confidence: float
    caller_timeout: bool


class Feedback:
    """Exact-stage forwards awaiting their outcome, and the failure runs per tenant and mapping."""

    def __init__(self, *, failures: int = FAILURES, step: float = STEP, tracked: int = TRACKED) -> None:
        self._failures, self._step, self._tracked = failures, step, tracked
        self._pending: OrderedDict[str, _Sent] = OrderedDict()
        self._runs: OrderedDict[tuple[str, str, str], int] = OrderedDict()  # bounded like the pending

    def watching(self, message_id: str) -> bool:
        return message_id in self._pending

    def sent(self, message_id: str, phrase: str, capability: str, confidence: float, *, tenant: str,
             caller_timeout: bool = False) -> None:
        """A request forwarded by the exact map; `caller_timeout`: its envelope asked an execution timeout."""
        self._pending[message_id] = _Sent(tenant, phrase, capability, confidence, caller_timeout)
        while len(self._pending) > self._tracked:
            self._pending.popitem(last=False)

    def ended(self, message_id: str, status: Status, error: ErrorInfo | None = None) -> Lowered | None:
        """A terminal status of a watched message; a Lowered when this failure completes a run."""
        if not status.is_terminal:
            return None  # ROUTED, STARTED...: keep waiting for the ending
        found = self._pending.pop(message_id, None)
        if found is None:
            return None
        key = (found.tenant, found.phrase, found.capability)
        who = blame(status, error, caller_timeout=found.caller_timeout)
        if who is None or who == "caller":
            return None  # says nothing of the mapping either way: neither counts nor resets the run
        if who == "success":
            self._runs.pop(key, None)
            return None
        run = self._runs.get(key, 0) + 1
        if run < self._failures:
            self._runs[key] = run
            self._runs.move_to_end(key)
            while len(self._runs) > self._tracked:
                self._runs.popitem(last=False)
            return None
        self._runs.pop(key, None)
        return Lowered(found.tenant, found.phrase, found.capability, round(max(found.confidence - self._step, 0.0), 4))
