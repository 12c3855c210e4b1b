"""The handler run a thread of work belongs to: set by the agent SDK around a handler, read by the client SDK, so a
child sent from a handler (`invoke`, `invoke_chain`, `send`) inherits its parent's trace, id, deadline and what is
left of its budget, and the parent's terminal receipt carries what its children spent (reach.core.allowance).

What a child is given is reserved until its terminal receipt comes back (then its real spend counts instead), so
children sent in parallel share what is left instead of each getting all of it (docs/decisions/0045).

A context variable: an async handler's task and a sync handler's thread (run in a copy of the context) both see
the run; outside a handler there is none and the client sends as it always did."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from reach.core.allowance import Spent, child_budget_ms, grant, inherit, subtree
from reach.core.usage import Meter
from reach.records import Envelope, Receipt

_current: ContextVar[Run | None] = ContextVar("reach_run", default=None)


@dataclass
class Run:
    """One handler run: its envelope, what it reported so far (the meter) and what its ended children spent."""

    envelope: Envelope
    meter: Meter = field(default_factory=Meter)
    _children: Spent = field(default_factory=Spent)
    _reserved: dict[str, Spent] = field(default_factory=dict)  # child message id -> what it was given, until it ends
    made: int = 0  # child envelopes built: evidence of what a run that timed out did (MAYBE_RAN, 0075)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def children(self) -> Spent:
        with self._lock:
            return self._children

    def spent(self) -> Spent:
        """The run's usage so far: its own reports and its ended children's (a running child counts for nothing)."""
        own = Spent(self.meter.input_tokens, self.meter.output_tokens, self.meter.cost_micros or 0)
        return own + self.children

    def committed(self) -> Spent:
        """What a new child cannot have: the run's usage so far and what its children in flight were given."""
        with self._lock:
            held = sum(self._reserved.values(), Spent())
        return self.spent() + held

    def ended(self, receipt: Receipt) -> None:
        """A child's terminal receipt: its usage (and its own children's) adds to this run's, and what it was given
        is no longer held for it."""
        with self._lock:
            self._reserved.pop(receipt.message_id, None)
            self._children = self._children + subtree(receipt.usage, receipt.timings)

    def child_fields(self, fields: dict[str, Any], *, now_ms: int, default_budget_ms: int) -> dict[str, Any]:
        """`new_envelope` arguments for a child: the parent's trace and id unless given, its budget's rest (less
        what the children in flight hold), its deadline at the latest."""
        parent = self.envelope
        fields.setdefault("parent_id", parent.message_id)
        if fields.get("trace_id") is None:
            fields["trace_id"] = parent.trace_id
        fields.update(inherit(self._budget(), self.committed(),
                              {"max_tokens": fields.get("max_tokens"),
                               "max_cost_micros": fields.get("max_cost_micros")}))
        fields["budget_ms"] = child_budget_ms(int(fields.get("budget_ms") or default_budget_ms), parent.deadline,
                                              now_ms)
        return fields

    def child(self, fields: dict[str, Any], build: Callable[[dict[str, Any]], Envelope], *, now_ms: int,
              default_budget_ms: int) -> Envelope:
        """A child envelope built by `build` from `child_fields`, what it is given held until it ends (`ended`):
        computed and held under one lock, so children sent at once from several threads never share a rest."""
        with self._lock:
            envelope = build(self.child_fields(fields, now_ms=now_ms, default_budget_ms=default_budget_ms))
            self.made += 1
            if envelope.deadline > self.envelope.deadline:  # built a millisecond later than the budget was computed
                envelope = envelope.model_copy(update={"deadline": self.envelope.deadline})
            given = grant(self._budget(), {"max_tokens": envelope.max_tokens,
                                           "max_cost_micros": envelope.max_cost_micros})
            if given != Spent():
                self._reserved[envelope.message_id] = given
            return envelope

    def _budget(self) -> dict[str, int | None]:
        return {"max_tokens": self.envelope.max_tokens, "max_cost_micros": self.envelope.max_cost_micros}


def current() -> Run | None:
    return _current.get()


@contextmanager
def running(run: Run) -> Iterator[Run]:
    """`run` is the current run inside the block (and in the threads it copies its context to)."""
    token = _current.set(run)
    try:
        yield run
    finally:
        _current.reset(token)


def child_ended(receipt: Receipt) -> None:
    """Count a child's terminal receipt towards the current run, if the caller is a handler."""
    run = _current.get()
    if run is not None and receipt.status.is_terminal:
        run.ended(receipt)
