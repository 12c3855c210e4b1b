"""Prometheus metrics derived from receipts and status-row transitions (no message-id labels).

Capability labels come from receipts, which any producer can write: only registered capabilities
(`capabilities()`, cached for a second) get a label of their own, at most `max_capabilities` of them;
everything else is counted under one label, `other`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reach.core.lifecycle import STARTED_AT, StatusRow
from reach.records import TERMINAL, Receipt, Status

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DECISION_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)


OTHER = "other"
DELIVERY_KIND = "DELIVERY"  # the error kind of what the timekeeper writes when a ROUTED attempt did not start
_MAX_REASONS = 50
_TERMINAL = frozenset(s.value for s in TERMINAL)


class Metrics:
    """The stream app's metrics, in their own registry so tests and workers never share one."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 capabilities: Callable[[], Collection[str]] | None = None, max_capabilities: int = 500) -> None:
        self._capabilities = capabilities
        self._max = max_capabilities
        self._labelled: set[str] = set()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._reasons: set[str] = set()
        self._known: Collection[str] = frozenset()
        self._known_at = float("-inf")
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.receipts = Counter("agentreach_receipts_total", "Receipts seen, by capability and status",
                                ["capability", "status"], registry=r)
        self.terminal = Counter("agentreach_messages_terminal_total",
                                "Messages (per generation) that reached a terminal status",
                                ["capability", "status"], registry=r)
        self.completed = Counter("agentreach_completed_total", "Completed messages, by whether the first "
                                 "attempt succeeded", ["capability", "first_attempt"], registry=r)
        self.retries = Counter("agentreach_retries_scheduled_total", "Retries scheduled on delay tiers",
                               ["capability"], registry=r)
        self.dead_letters = Counter("agentreach_dead_letters_total", "Messages dead-lettered, by reason",
                                    ["capability", "reason"], registry=r)
        self.delivery = Histogram("agentreach_delivery_latency_seconds", "ROUTED -> STARTED",
                                  ["capability"], buckets=_LATENCY_BUCKETS, registry=r)
        self.execution = Histogram("agentreach_execution_latency_seconds", "STARTED -> terminal",
                                   ["capability"], buckets=_LATENCY_BUCKETS, registry=r)
        # observed by the router in this process, per decision (Router.observe_decision; empty in a status-only worker)
        self.decision = Histogram("agentreach_route_decision_seconds", "Time the router spent deciding",
                                  buckets=_DECISION_BUCKETS, registry=r)
        self.candidates = Histogram("agentreach_route_candidates", "Candidates per routing decision",
                                    buckets=(0, 1, 2, 3, 5, 10, 20, 50, 100, 1000), registry=r)
        self.undecodable = Counter("agentreach_undecodable_receipts_total", "Receipts skipped: undecodable",
                                   registry=r)
        self.replies = Counter("agentreach_replies_total", "Replies to reply_to topics, by outcome "
                               "(sent, failed, refused: not a <ns>.replies.* topic, no_topic)", ["outcome"], registry=r)
        self.callbacks = Counter("agentreach_callbacks_total", "Callbacks the status fold produced, by outcome "
                                 "(sent: the envelope to its channel, rejected: a bad spec, no_channel: no topic; "
                                 "a batch read again counts again)",
                                 ["outcome"], registry=r)
        self.callbacks_due = Counter("agentreach_callbacks_due_total", "Ended messages whose callback the status "
                                     "fold produced (or rejected): the callback-effective rate's denominator",
                                     ["capability"], registry=r)
        self.callbacks_effective = Counter("agentreach_callbacks_effective_total", "Callbacks that reached "
                                           "DELIVERED (CALLBACKED on the original message): the numerator",
                                           ["capability"], registry=r)
        self.deliveries = Counter("agentreach_deliveries_total", "Routed attempts by how their delivery ended: "
                                  "in_time (STARTED within the delivery timeout), late (STARTED after it, before "
                                  "the timekeeper acted), timed_out (the timekeeper's DELIVERY_TIMEOUT)",
                                  ["capability", "outcome"], registry=r)
        self.fallbacks = Counter("agentreach_fallbacks_total", "Fallback children the status fold sent for agents' "
                                 "endings, by outcome (sent, not_sent: the reason is logged and on the row; a batch "
                                 "read again counts again)", ["outcome"], registry=r)
        self.lag = Gauge("agentreach_consumer_lag_messages", "Consumer lag from the broker",
                         ["topic", "group"], registry=r)
        self.agents = Gauge("agentreach_agents", "Agent instances by state", ["agent_id", "state"], registry=r)
        self.ready = Gauge("agentreach_ready_instances", "READY instances serving a capability", ["capability"],
                           registry=r)
        self.table_size = Gauge("agentreach_status_table_rows", "Rows in this worker's status table",
                                registry=r)
        self.stale_no_route = Gauge("agentreach_stale_no_route_dead_letters",
                                    "NO_ROUTE dead letters older than the threshold whose capability has no agent; "
                                    "owner: the owners of the tenant's apps that may call it (`reach apps --owner`)",
                                    ["capability", "owner"], registry=r)

    def observe(self, receipt: Receipt, before: StatusRow | None, after: StatusRow, *,
                changed: bool | None = None) -> None:
        """`observe_row` for models (the status fold itself folds dicts)."""
        self.observe_row(receipt.model_dump(), None if before is None else before.model_dump(mode="json"),
                         after.model_dump(mode="json"), changed=changed)

    def observe_row(self, receipt: Mapping[str, Any], before: Mapping[str, Any] | None, after: Mapping[str, Any], *,
                    changed: bool | None = None) -> None:
        """Count one folded receipt (the dict fastavro decoded) and its row's change (rows as their JSON dicts);
        terminal counters move only on the row's first terminal transition. `changed`: whether `after` differs from
        `before`, when the caller knows it already (one comparison)."""
        if changed is None:
            changed = after is not before and after != before
        status = receipt["status"]
        cap = self.label(receipt["capability"])
        self._child(self.receipts, cap, str(status)).inc()
        if status == Status.RETRY_SCHEDULED and changed:
            self.retries.labels(cap).inc()
        decision = receipt["decision"]
        if status == Status.ROUTED and decision is not None:
            self.candidates.observe(len(decision["candidates"]))
        if status == Status.STARTED:
            routed = _last_at(after, Status.ROUTED, receipt["generation"], receipt["attempt"])
            if routed is not None and before is not None and receipt["at"] >= routed:
                self._child(self.delivery, cap).observe((receipt["at"] - routed) / 1000)
        if changed:
            self._closure(cap, receipt, before, after)
        terminal = after["status"] in _TERMINAL
        newly_terminal = terminal and (before is None or before["status"] not in _TERMINAL
                                       or before["generation"] != after["generation"])
        if not newly_terminal:
            return
        self._child(self.terminal, cap, str(after["status"])).inc()
        started = _last_at(after, Status.STARTED, after["generation"], after["attempt"])
        if started is not None and after["terminal_at"] is not None:
            self._child(self.execution, cap).observe(max(0, after["terminal_at"] - started) / 1000)
        if after["status"] == Status.COMPLETED:
            self._child(self.completed, cap, "true" if after["attempt"] == 1 else "false").inc()
        if after["status"] == Status.DEAD_LETTERED:
            error = receipt["error"]
            reason = error["code"] if error else "UNKNOWN"
            if reason not in self._reasons:  # error codes come from agents too: bounded like capabilities
                reason = reason if len(self._reasons) < _MAX_REASONS else OTHER
                self._reasons.add(reason)
            self.dead_letters.labels(cap, reason).inc()

    def _closure(self, cap: str, receipt: Mapping[str, Any], before: Mapping[str, Any] | None,
                 after: Mapping[str, Any]) -> None:
        """The delivery-success and callback-effective counters (docker/prometheus/alerts.yml), from a receipt that
        changed its row (a duplicate changes nothing, so it counts nothing)."""
        outcome = delivery_outcome(receipt, before)
        if outcome is not None:
            self._child(self.deliveries, cap, outcome).inc()
        if receipt["status"] == Status.CALLBACKED:
            self.callbacks_effective.labels(cap).inc()
        if after["callback_sent"] and not (before is not None and before["callback_sent"]
                                           and before["generation"] == after["generation"]):
            self.callbacks_due.labels(cap).inc()

    def _child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, kept: the fold counts every receipt, and labels() locks and builds keys each
        time (the label values are bounded by `label`, so is this map)."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def label(self, capability: str) -> str:
        """The capability's own label when it is registered (and the bound allows), else `other`."""
        if capability in self._labelled:
            return capability
        if len(self._labelled) >= self._max or not self._registered(capability):
            return OTHER
        self._labelled.add(capability)
        return capability

    def _registered(self, capability: str) -> bool:
        if self._capabilities is None:
            return True  # no registry to ask: the bound alone applies
        now = time.monotonic()
        if now - self._known_at > 1.0:
            self._known, self._known_at = self._capabilities(), now
        return capability in self._known

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def delivery_outcome(receipt: Mapping[str, Any], before: Mapping[str, Any] | None) -> str | None:
    """How one routed attempt's delivery ended, counted once per attempt: `in_time` / `late` at its STARTED, or at
    the outcome that carries its start when the run skipped STARTED (`started_at` in its timings) (late: after the
    row's delivery_due_at, the timekeeper not yet acting), `timed_out` at the timekeeper's DELIVERY_TIMEOUT receipt.
    A STARTED read before its ROUTED counts at the ROUTED (it started before the router's receipt landed: in time); a
    STARTED after the timekeeper moved the row on counted as timed_out already. The timekeeper's receipts are the
    ones with an error of kind DELIVERY (a reroute, a retry, a dead letter or a lost envelope, each because the
    attempt did not start in time). Receipt and row as dicts (`Metrics.observe_row`)."""
    gen, attempt, status = receipt["generation"], receipt["attempt"], receipt["status"]
    routed = before is not None and before["status"] == Status.ROUTED and (before["generation"], before["attempt"]) == (
        gen, attempt)
    error = receipt["error"]
    if error is not None and error["kind"] == DELIVERY_KIND:
        return "timed_out" if routed else None
    started = receipt["at"] if status == Status.STARTED else receipt["timings"].get(STARTED_AT)
    if started is not None:  # a STARTED receipt, or an outcome whose run skipped it (its start in its timings)
        if not routed or before is None:
            return None
        due = before["delivery_due_at"]
        return "late" if due is not None and started > due else "in_time"
    if status == Status.ROUTED and before is not None:
        started_first = _last_at(before, Status.STARTED, gen, attempt) is not None
        routed_before = _last_at(before, Status.ROUTED, gen, attempt) is not None
        return "in_time" if started_first and not routed_before else None
    return None


def _last_at(row: Mapping[str, Any], status: Status, generation: int, attempt: int) -> int | None:
    times = [s["at"] for s in row["timeline"]
             if s["status"] == status and s["generation"] == generation and s["attempt"] == attempt]
    return times[-1] if times else None
