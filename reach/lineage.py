"""The handler run a thread of work belongs to: set by the agent SDK around a handler, read by the client SDK, so a
child sent from a handler (`invoke`, `invoke_chain`, `send`) inherits its parent's trace, id, deadline and what is
left of its budget, and the parent's terminal receipt carries what its children spent (reach.core.allowance).

A context variable: an async handler's task and a sync handler's thread (run in a copy of the context) both see
the run; outside a handler there is none and the client sends as it always did."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from reach.core.allowance import Spent, child_budget_ms, inherit, subtree
from reach.core.usage import Meter
from reach.records import Envelope, Receipt

_current: ContextVar[Run | None] = ContextVar("reach_run", default=None)


@dataclass
class Run:
    """One handler run: its envelope, what it reported so far (the meter) and what its ended children spent."""

    envelope: Envelope
    meter: Meter = field(default_factory=Meter)
    _children: Spent = field(default_factory=Spent)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def children(self) -> Spent:
        with self._lock:
            return self._children

    def spent(self) -> Spent:
        """The run's usage so far: its own reports and its ended children's (a running child counts for nothing)."""
        own = Spent(self.meter.input_tokens, self.meter.output_tokens, self.meter.cost_micros or 0)
        return own + self.children

    def ended(self, receipt: Receipt) -> None:
        """A child's terminal receipt: its usage (and its own children's) adds to this run's."""
        with self._lock:
            self._children = self._children + subtree(receipt.usage, receipt.timings)

    def child_fields(self, fields: dict[str, Any], *, now_ms: int, default_budget_ms: int) -> dict[str, Any]:
        """`new_envelope` arguments for a child: the parent's trace and id unless given, its budget's rest, its
        deadline at the latest."""
        parent = self.envelope
        fields.setdefault("parent_id", parent.message_id)
        if fields.get("trace_id") is None:
            fields["trace_id"] = parent.trace_id
        fields.update(inherit({"max_tokens": parent.max_tokens, "max_cost_micros": parent.max_cost_micros},
                              self.spent(),
                              {"max_tokens": fields.get("max_tokens"),
                               "max_cost_micros": fields.get("max_cost_micros")}))
        fields["budget_ms"] = child_budget_ms(int(fields.get("budget_ms") or default_budget_ms), parent.deadline,
                                              now_ms)
        return fields


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
