"""A circuit breaker, pure and generic: CLOSED -> OPEN -> HALF_OPEN -> CLOSED over outcomes with explicit times.

Thresholds come in per use (`BreakerRules`), so instances and channels share it. CLOSED opens when the
failure share of the calls in the last `window_ms` exceeds `error_rate` over at least `min_calls`, or
when `overloads` overload-class failures fall in that window. OPEN lasts `open_ms`, then HALF_OPEN
admits `probe_admit` of the traffic: `probes` successes close it, one failure opens it again. Calls
before the last transition never count again (a closed breaker starts with an empty window).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from reach.records import BreakerState


class Outcome(StrEnum):
    """What one call told the breaker."""

    SUCCESS = "success"
    FAILURE = "failure"
    OVERLOAD = "overload"  # a failure of the rate-limit / 429 class: also counts as a failure


@dataclass(frozen=True)
class BreakerRules:
    """The thresholds of one breaker; the defaults are the design's."""

    error_rate: float = 0.2
    min_calls: int = 10
    window_ms: int = 10_000
    overloads: int = 3
    open_ms: int = 30_000
    probe_admit: float = 0.1
    probes: int = 3


class CircuitBreaker:
    """One breaker's state; `record` and `tick` move it, both taking the time explicitly (no clock inside)."""

    def __init__(self, rules: BreakerRules, *, state: BreakerState = BreakerState.CLOSED,
                 open_until: int | None = None, since: int = 0, probe_successes: int = 0,
                 reason: str | None = None) -> None:
        self.rules = rules
        # an UNKNOWN state (a newer writer's) restores as CLOSED, as routers read it
        self.state: BreakerState = state if state is not BreakerState.UNKNOWN else BreakerState.CLOSED
        self.open_until = open_until if self.state is BreakerState.OPEN else None
        self.since = since
        self.probe_successes = probe_successes
        self.reason = reason
        self._recent: deque[tuple[int, Outcome]] = deque()
        self._failures = 0
        self._overloads = 0

    @property
    def admit(self) -> float:
        """The share of traffic this breaker lets through: 1 CLOSED, probe_admit HALF_OPEN, 0 OPEN."""
        if self.state is BreakerState.OPEN:
            return 0.0
        return self.rules.probe_admit if self.state is BreakerState.HALF_OPEN else 1.0

    def record(self, outcome: Outcome, at: int) -> bool:
        """Fold one call's outcome at `at` (ms); True when the state changed."""
        if at < self.since:
            return False  # before the last transition: already judged
        if self.state is BreakerState.OPEN:
            return False  # a call still finishing from before it opened: no new evidence
        if self.state is BreakerState.HALF_OPEN:
            if outcome is Outcome.SUCCESS:
                self.probe_successes += 1
                if self.probe_successes >= self.rules.probes:
                    self._move(BreakerState.CLOSED, at, f"{self.probe_successes} probes succeeded")
                    return True
                return False
            self._open(at, f"a probe failed ({outcome})")
            return True
        self._push(outcome, at)
        return self._judge(at)

    def trip(self, now: int, reason: str) -> bool:
        """Open now for a reason the caller judged (e.g. a channel's graded signals); True when it changed."""
        if self.state is BreakerState.OPEN:
            return False
        self._open(now, reason)
        return True

    def tick(self, now: int) -> bool:
        """Time-driven transitions (OPEN -> HALF_OPEN at open_until); True when the state changed."""
        if self.state is BreakerState.OPEN and self.open_until is not None and now >= self.open_until:
            self._move(BreakerState.HALF_OPEN, now, "open period over: probing")
            return True
        return False

    def window(self, now: int) -> tuple[int, int, int]:
        """(calls, failures, overloads) in the current window, counted since the last transition."""
        self._expire(now)
        return len(self._recent), self._failures, self._overloads

    def _push(self, outcome: Outcome, at: int) -> None:
        self._recent.append((at, outcome))
        if outcome is not Outcome.SUCCESS:
            self._failures += 1
        if outcome is Outcome.OVERLOAD:
            self._overloads += 1
        self._expire(at)

    def _expire(self, now: int) -> None:
        horizon = now - self.rules.window_ms
        while self._recent and self._recent[0][0] <= horizon:
            _, old = self._recent.popleft()
            if old is not Outcome.SUCCESS:
                self._failures -= 1
            if old is Outcome.OVERLOAD:
                self._overloads -= 1

    def _judge(self, now: int) -> bool:
        calls, failures, overloads = len(self._recent), self._failures, self._overloads
        rules = self.rules
        if overloads >= rules.overloads:
            self._open(now, f"{overloads} overload failures within {rules.window_ms} ms")
            return True
        if calls >= rules.min_calls and failures / calls > rules.error_rate:
            self._open(now, f"{failures} of {calls} calls failed within {rules.window_ms} ms "
                            f"(> {rules.error_rate:.0%})")
            return True
        return False

    def _open(self, now: int, reason: str) -> None:
        self._move(BreakerState.OPEN, now, reason)
        self.open_until = now + self.rules.open_ms

    def _move(self, state: BreakerState, now: int, reason: str) -> None:
        self.state = state
        self.since = now
        self.reason = reason
        self.open_until = None
        self.probe_successes = 0
        self._recent.clear()
        self._failures = self._overloads = 0
