"""The health table of the instances one writer owns, pure: fold calls, tick, and say what to publish when.

A record is due at once when a decision changes (breaker, admit, weight, timeout factor, restore step),
else at most every emit_interval_ms while its numbers move (new calls, windows decaying); an instance
idle for forget_ms is dropped with a tombstone when it is healthy or no longer registered, so the
compacted topic holds only live instances.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.core.healthmodel.calls import Call, call_of
from reach.core.healthmodel.instance import InstanceTracker
from reach.core.healthmodel.settings import HealthSettings
from reach.core.healthmodel.windows import CapabilityLatency
from reach.records import InstanceHealth


@dataclass
class _Published:
    decision: tuple[object, ...] = ()
    numbers: dict[str, Any] = field(default_factory=dict)
    at: int | None = None


class HealthTable:
    """Trackers of owned instances; `owns(instance_id)` says which calls are this table's to fold."""

    def __init__(self, settings: HealthSettings, *, owns: Callable[[str], bool] = lambda _i: True,
                 slow_threshold_ms: Callable[[str], int | None] = lambda _c: None) -> None:
        self.settings = settings
        self._owns = owns
        self._policy_slow = slow_threshold_ms
        self.trackers: dict[str, InstanceTracker] = {}
        self._published: dict[str, _Published] = {}
        self._capabilities: dict[str, CapabilityLatency] = {}
        self._versions: dict[str, str] = {}
        self.calls = 0

    def restore(self, record: InstanceHealth | None, instance_id: str) -> None:
        """Take over a published record (None: a tombstone, the instance is gone)."""
        if record is None:
            self.trackers.pop(instance_id, None)
            self._published.pop(instance_id, None)
            return
        tracker = InstanceTracker.restore(record, self.settings)
        self.trackers[instance_id] = tracker
        self._published[instance_id] = _Published(decision=tracker.decision(), at=record.at)

    def drop(self, keep: Callable[[str], bool]) -> None:
        """Forget every instance `keep` says no to (ownership moved elsewhere), without tombstones."""
        for instance_id in [i for i in self.trackers if not keep(i)]:
            del self.trackers[instance_id]
            self._published.pop(instance_id, None)

    def clear_windows(self) -> None:
        """Before receipts are replayed into them: each call is then counted once."""
        for tracker in self.trackers.values():
            tracker.windows.clear()

    def republish(self, instance_id: str) -> None:
        """Publish the instance again at the next `due` (its last record was not acknowledged)."""
        published = self._published.get(instance_id)
        if published is not None:
            published.decision, published.numbers, published.at = (), {}, None

    def build_version(self, instance_id: str, version: str) -> None:
        self._versions[instance_id] = version
        tracker = self.trackers.get(instance_id)
        if tracker is not None:
            tracker.build_version = version

    def forget_version(self, instance_id: str) -> None:
        self._versions.pop(instance_id, None)

    def fold(self, receipt: Mapping[str, Any]) -> Call | None:
        """Fold one decoded receipt; the call it was, when it was one of an owned instance."""
        call = call_of(receipt)
        if call is None:
            return None
        if call.outcome.value == "success" and call.run_ms is not None and call.capability:
            self._latency(call.capability).add(call.at, call.run_ms)
        if not self._owns(call.instance_id):
            return None
        tracker = self.trackers.get(call.instance_id)
        if tracker is None:
            tracker = self.trackers[call.instance_id] = InstanceTracker(
                call.instance_id, call.agent_id, self.settings, build_version=self._versions.get(call.instance_id, ""))
        tracker.observe(call, slow_threshold_ms=self.slow_threshold_ms(call.capability, call.at))
        self.calls += 1
        return call

    def slow_threshold_ms(self, capability: str, now: int) -> float | None:
        """POLICY slow_threshold_ms of the capability, else slow_p50_factor x its p50 over the last minute."""
        policy = self._policy_slow(capability)
        if policy:
            return float(policy)
        p50 = self._latency(capability).p50(now)
        return None if p50 is None else max(1.0, p50) * self.settings.slow_p50_factor

    def _latency(self, capability: str) -> CapabilityLatency:
        found = self._capabilities.get(capability)
        if found is None:
            found = self._capabilities[capability] = CapabilityLatency(
                samples=self.settings.latency_samples, latency_ms=self.settings.eject_window_ms)
        return found

    def due(self, now: int) -> list[tuple[str, InstanceHealth | None]]:
        """Tick every tracker; the records to publish now, in instance order (None: a tombstone)."""
        out: list[tuple[str, InstanceHealth | None]] = []
        interval = self.settings.emit_interval_ms
        for instance_id in sorted(self.trackers):
            tracker = self.trackers[instance_id]
            tracker.tick(now)
            # idle and healthy, or idle and gone from the registry: forgotten (a registered instance that is still
            # OPEN, probing or restoring keeps its state, or it would come back at full share unproven)
            if tracker.idle(now) and (tracker.healthy or instance_id not in self._versions):
                del self.trackers[instance_id]
                self._published.pop(instance_id, None)
                out.append((instance_id, None))
                continue
            published = self._published.setdefault(instance_id, _Published())
            decision = tracker.decision()
            changed = decision != published.decision
            if not changed and published.at is not None and now - published.at < interval:
                continue
            record = tracker.record(now)
            numbers = record.model_dump(exclude={"at"})
            if changed or numbers != published.numbers:
                published.decision, published.numbers, published.at = decision, numbers, now
                out.append((instance_id, record))
        return out
