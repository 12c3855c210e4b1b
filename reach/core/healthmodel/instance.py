"""One instance's health, pure: its windows, its breaker, ejection, the slow rule and the gradual restore.

`observe(call)` folds one call (the breaker may open or close at once); `tick(now)` makes the time-driven
transitions (OPEN -> HALF_OPEN, the end of an ejection or slow period, restore steps, the ejection and slow
rules over the windows); `record(now)` is the InstanceHealth the writer publishes; `restore(record)` starts
from a published one. The router reads the record's breaker, admit, weight and timeout_factor:
- breaker OPEN: not a candidate until open_until; HALF_OPEN: admit = probe share;
- after a breaker closes, or an ejection's hold ends, admit climbs the restore ladder (0.1 -> 0.5 -> 1.0
  by default), a step per restore_step_ms while it stays healthy; an unhealthy step ejects it again;
- ejected (1-minute success below eject_success) or slow (slow_windows consecutive slow windows): weight 0,
  eligible only when nothing else is; slow also sets timeout_factor (the sole slow candidate gets longer).
"""

from __future__ import annotations

from reach.core.breaker import CircuitBreaker, Outcome
from reach.core.healthmodel.calls import Call
from reach.core.healthmodel.settings import HealthSettings
from reach.core.healthmodel.windows import Counts, Windows
from reach.records import BreakerState, InstanceHealth


class InstanceTracker:
    """The health state of one instance (mutable, no I/O, no clock: every method takes the time)."""

    def __init__(self, instance_id: str, agent_id: str, settings: HealthSettings, *, build_version: str = "") -> None:
        self.instance_id = instance_id
        self.agent_id = agent_id
        self.build_version = build_version
        self.settings = settings
        self.breaker = CircuitBreaker(settings.breaker)
        self.windows = Windows(bucket_ms=settings.bucket_ms, keep_ms=settings.long_window_ms,
                               samples=settings.latency_samples, latency_ms=settings.eject_window_ms)
        self.restore_step: int | None = None
        self.step_started_at: int | None = None
        self.ejected_until: int | None = None
        self.slow_until: int | None = None
        self.rules_since = 0
        self.reason: str | None = None
        self.consecutive_failures = 0
        self.judged_until = 0  # calls at or before this were judged by the writer that published the restored record
        self.last_call_at: int | None = None

    # -- restore -------------------------------------------------------------------------------------

    @classmethod
    def restore(cls, record: InstanceHealth, settings: HealthSettings) -> InstanceTracker:
        """Continue from a published record: decisions as published, windows empty (the writer replays receipts
        into them; calls up to the record's `at` only fill windows, they do not decide again)."""
        tracker = cls(record.instance_id, record.agent_id, settings, build_version=record.build_version)
        since = record.rules_since or 0
        tracker.breaker = CircuitBreaker(settings.breaker, state=record.breaker, open_until=record.open_until,
                                         since=since, probe_successes=record.probe_successes, reason=record.reason)
        if tracker.breaker.state is BreakerState.OPEN and tracker.breaker.open_until is None:
            tracker.breaker.open_until = record.at + settings.open_ms  # a record from a writer that left it out
        steps = len(settings.restore_steps)
        tracker.restore_step = None if record.restore_step is None else min(max(record.restore_step, 0), steps - 1)
        tracker.step_started_at = record.step_started_at if tracker.restore_step is not None else None
        if tracker.restore_step is not None and tracker.step_started_at is None:
            tracker.step_started_at = record.at
        tracker.ejected_until = record.ejected_until
        tracker.slow_until = record.slow_until
        tracker.rules_since = since
        tracker.reason = record.reason
        tracker.consecutive_failures = record.consecutive_failures
        tracker.judged_until = record.at
        return tracker

    # -- calls ---------------------------------------------------------------------------------------

    def observe(self, call: Call, *, slow_threshold_ms: float | None) -> None:
        """Fold one call; `slow_threshold_ms` is its capability's (None: no threshold known yet)."""
        ok = call.outcome is Outcome.SUCCESS
        slow = call.timed_out or (slow_threshold_ms is not None and call.run_ms is not None
                                  and call.run_ms > slow_threshold_ms)
        self.windows.add(call.at, ok=ok, overload=call.outcome is Outcome.OVERLOAD, slow=slow, run_ms=call.run_ms)
        self.last_call_at = call.at if self.last_call_at is None else max(self.last_call_at, call.at)
        if call.agent_id:
            self.agent_id = call.agent_id
        if call.at <= self.judged_until:
            return  # replayed: the restored record already reflects it
        self.consecutive_failures = 0 if ok else self.consecutive_failures + 1
        before = self.breaker.state
        if self.breaker.record(call.outcome, call.at):
            self._after_breaker(before, call.at)

    # -- time ----------------------------------------------------------------------------------------

    def tick(self, now: int) -> None:
        """The transitions time makes, then the window rules."""
        s = self.settings
        self.windows.expire(now)
        before = self.breaker.state
        if self.breaker.tick(now):
            self._after_breaker(before, now)
        if self.breaker.state is not BreakerState.CLOSED:
            return
        if self.slow_until is not None and now >= self.slow_until:
            self.slow_until = None
            self.reason = "slow period over"
            self._reset(now)
        if self.ejected_until is not None:
            if now < self.ejected_until:
                return
            self.ejected_until = None
            self._begin_restore(now, "ejection hold over: restoring gradually")
        if self._eject_if_unhealthy(now):
            return
        if self.restore_step is not None and self.step_started_at is not None \
                and now - self.step_started_at >= s.restore_step_ms:
            self._next_step(now)
        if self.slow_until is None:
            self._slow_if_slow(now)

    def _eject_if_unhealthy(self, now: int) -> bool:
        s = self.settings
        counts = self.windows.counts(now, s.eject_window_ms, since=self.rules_since)
        success = counts.success
        if counts.calls < s.eject_min_calls or success is None or success >= s.eject_success:
            return False
        self.ejected_until = now + s.eject_hold_ms
        self.restore_step = self.step_started_at = None
        self.reason = (f"ejected: {success:.0%} of {counts.calls} calls succeeded within {s.eject_window_ms} ms "
                       f"(< {s.eject_success:.0%})")
        self._reset(now)
        return True

    def _next_step(self, now: int) -> None:
        assert self.restore_step is not None
        steps = self.settings.restore_steps
        nxt = self.restore_step + 1
        if nxt >= len(steps) or steps[nxt] >= 1.0:
            self.restore_step = self.step_started_at = None
            self.reason = "restored"
            return
        self.restore_step = nxt
        self.step_started_at = now
        self.reason = f"restoring: admit {steps[nxt]:.0%}"

    def _slow_if_slow(self, now: int) -> None:
        s = self.settings
        windows = self.windows.slices(now, s.slow_window_ms, s.slow_windows, since=self.rules_since)
        if len(windows) < s.slow_windows or not all(_slow(w, s) for w in windows):
            return
        self.slow_until = now + s.slow_ms
        ratio = sum(w.slow for w in windows) / max(1, sum(w.calls for w in windows))
        self.reason = (f"slow: {ratio:.0%} slow calls over {s.slow_windows} windows of {s.slow_window_ms} ms "
                       f"(> {s.slow_ratio:.0%})")

    def _after_breaker(self, before: BreakerState, now: int) -> None:
        after = self.breaker.state
        self.reason = self.breaker.reason
        self.rules_since = self.breaker.since
        if after is BreakerState.OPEN:
            self.restore_step = self.step_started_at = self.ejected_until = None
        elif after is BreakerState.CLOSED and before is BreakerState.HALF_OPEN:
            self._begin_restore(now, f"breaker closed ({self.breaker.reason}): restoring gradually")

    def _begin_restore(self, now: int, reason: str) -> None:
        self.restore_step = 0
        self.step_started_at = now
        self.reason = reason
        self._reset(now)

    def _reset(self, now: int) -> None:
        """Calls before now no longer drive the rules."""
        self.rules_since = now
        self.breaker.since = max(self.breaker.since, now)

    # -- what the router reads ----------------------------------------------------------------------

    @property
    def admit(self) -> float:
        if self.breaker.state is not BreakerState.CLOSED:
            return self.breaker.admit
        return self.settings.restore_steps[self.restore_step] if self.restore_step is not None else 1.0

    @property
    def weight(self) -> float:
        return 0.0 if self.ejected_until is not None or self.slow_until is not None else 1.0

    @property
    def timeout_factor(self) -> float:
        return self.settings.slow_timeout_factor if self.slow_until is not None else 1.0

    def decision(self) -> tuple[object, ...]:
        """What a change of publishes at once (the rest is published at most every emit_interval_ms)."""
        return (self.breaker.state, self.breaker.open_until, self.admit, self.weight, self.timeout_factor,
                self.restore_step, self.ejected_until, self.slow_until)

    def idle(self, now: int) -> bool:
        """No call within forget_ms."""
        last = self.last_call_at if self.last_call_at is not None else self.judged_until
        return now - last >= self.settings.forget_ms

    @property
    def healthy(self) -> bool:
        """CLOSED, fully restored, neither ejected nor slow: forgetting it changes nothing for the router."""
        return (self.breaker.state is BreakerState.CLOSED and self.restore_step is None and self.ejected_until is None
                and self.slow_until is None)

    def record(self, now: int) -> InstanceHealth:
        s = self.settings
        self.windows.expire(now)
        short = self.windows.counts(now, s.eject_window_ms)
        long = self.windows.counts(now, s.long_window_ms)
        recent = self.windows.counts(now, s.error_window_ms)
        slow = self.windows.counts(now, s.slow_window_ms * s.slow_windows)
        p50, p95 = self.windows.percentiles(0.5, 0.95)
        return InstanceHealth(
            instance_id=self.instance_id, agent_id=self.agent_id, build_version=self.build_version, at=now,
            breaker=self.breaker.state, open_until=self.breaker.open_until, admit=self.admit, weight=self.weight,
            timeout_factor=self.timeout_factor, reason=self.reason, calls_1m=short.calls,
            success_1m=_rounded(short.success), calls_5m=long.calls, success_5m=_rounded(long.success),
            p50_ms=p50, p95_ms=p95, slow_ratio=_rounded(slow.slow / slow.calls if slow.calls else None),
            overloads_10s=recent.overloads, consecutive_failures=self.consecutive_failures,
            probe_successes=self.breaker.probe_successes, restore_step=self.restore_step,
            step_started_at=self.step_started_at, ejected_until=self.ejected_until, slow_until=self.slow_until,
            rules_since=self.rules_since or None,
        )


def _slow(window: Counts, settings: HealthSettings) -> bool:
    return window.calls >= settings.slow_min_calls and window.slow / window.calls > settings.slow_ratio


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
