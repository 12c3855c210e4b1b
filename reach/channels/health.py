"""Channel health (pure): HEALTHY / DEGRADED / OPEN per destination and tenant of a channel instance, built on
reach.core.breaker.

A destination is where a send goes as far as failures are concerned: a webhook's receiver host (the caller
chose it), the provider for email and SMS (the operator's). `Destinations` keeps one `ChannelHealth` per
(tenant, destination), so a receiver that answers 429 or times out opens the channel for that tenant's sends
to that host only, never for other tenants or hosts (a tenant could otherwise point a callback at its own
server and shut webhooks off for everyone).

Three signals over a rolling window (1 minute): send success rate, p95 send latency, and the arrival
rate of delivery reports for sends that expect one (counted once a send is `report_grace_ms` old). Each
is graded against its thresholds (success >= 98% / >= 80% / < 80%, p95 <= 800 ms / <= 2,000 ms /
> 2,000 ms, arrival >= 90% / >= 70% / < 70%) and the state is the worst grade. A grade of OPEN trips the
breaker, and so do `rate_limits` 429s within 10 s (the breaker's overload rule); while the breaker is
not CLOSED the state is OPEN: OPEN for `open_ms`, then probes (one every `probe_every_ms`) until
`probes` pass. A signal with fewer than `min_sends` samples is not graded (no verdict on noise), and
only sends after the breaker's last transition count, so a closed breaker starts afresh.

Idle probes: a destination that nothing was sent to for `idle_probe_every_ms` (30 s) is probed without a message
(`idle_probe`: e.g. SMTP's NOOP) when its provider can be probed: `idle_probe_failures` failed probes in a row
open it, and while it is HALF_OPEN an idle probe is its probe, so a channel that went down while idle is known
OPEN before a request finds out, and one that came back closes without a real message risked on it.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from enum import StrEnum

from reach.core.breaker import BreakerRules, CircuitBreaker, Outcome
from reach.records import BreakerState


class ChannelState(StrEnum):
    """How a channel instance is doing; OPEN instances get no sends (and no retries)."""

    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    OPEN = "OPEN"


_ORDER = {ChannelState.HEALTHY: 0, ChannelState.DEGRADED: 1, ChannelState.OPEN: 2}


@dataclass(frozen=True)
class ChannelRules:
    """The thresholds of issue 15; tests pass shorter durations."""

    window_ms: int = 60_000
    min_sends: int = 10
    success_healthy: float = 0.98
    success_degraded: float = 0.80
    p95_healthy_ms: float = 800.0
    p95_degraded_ms: float = 2_000.0
    arrival_healthy: float = 0.90
    arrival_degraded: float = 0.70
    report_grace_ms: int = 10_000
    rate_limits: int = 3
    rate_limit_window_ms: int = 10_000
    open_ms: int = 30_000
    probe_every_ms: int = 30_000
    probes: int = 3
    idle_probe_every_ms: int = 30_000
    idle_probe_failures: int = 2

    def breaker(self) -> BreakerRules:
        """The breaker's rules: only the 429 rule opens it by itself (the graded signals trip it)."""
        return BreakerRules(error_rate=1.0, min_calls=1 << 30, window_ms=self.rate_limit_window_ms,
                            overloads=self.rate_limits, open_ms=self.open_ms, probe_admit=0.0, probes=self.probes)


def _grade_high(value: float | None, healthy: float, degraded: float) -> ChannelState:
    if value is None or value >= healthy:
        return ChannelState.HEALTHY
    return ChannelState.DEGRADED if value >= degraded else ChannelState.OPEN


def grade(*, success: float | None, p95_ms: float | None, arrival: float | None,
          rules: ChannelRules = ChannelRules()) -> ChannelState:
    """The worst of the three signals' grades (None: not enough samples, not graded)."""
    latency = ChannelState.HEALTHY
    if p95_ms is not None and p95_ms > rules.p95_healthy_ms:
        latency = ChannelState.DEGRADED if p95_ms <= rules.p95_degraded_ms else ChannelState.OPEN
    grades = (_grade_high(success, rules.success_healthy, rules.success_degraded), latency,
              _grade_high(arrival, rules.arrival_healthy, rules.arrival_degraded))
    return max(grades, key=_ORDER.__getitem__)


@dataclass(slots=True)
class _Send:
    at: int
    ok: bool
    latency_ms: float
    expects_report: bool
    provider_message_id: str | None = None
    reported: bool = False


class ChannelHealth:
    """One channel instance's signals and breaker; every method takes the time explicitly (no clock inside) and
    holds the instance's lock (a scrape on another thread must not see the deques mid-change)."""

    def __init__(self, rules: ChannelRules = ChannelRules()) -> None:
        self.rules = rules
        self.breaker = CircuitBreaker(rules.breaker())
        self._sends: deque[_Send] = deque()
        self._by_id: dict[str, _Send] = {}
        self._last_probe: int | None = None
        self._idle_failures = 0
        # the send path (the event loop) and the metrics scrape (prometheus_client's thread) both use it
        self._lock = threading.RLock()

    def send(self, at: int, *, ok: bool, latency_ms: float, rate_limited: bool = False,
             provider_message_id: str | None = None, expects_report: bool = False) -> None:
        """One send's outcome (a 429 is a failure and feeds the 429 rule)."""
        with self._lock:
            outcome = Outcome.OVERLOAD if rate_limited else (Outcome.SUCCESS if ok else Outcome.FAILURE)
            if self.breaker.state is BreakerState.CLOSED:
                self.breaker.record(outcome, at)
            send = _Send(at, ok, latency_ms, expects_report and ok, provider_message_id)
            self._sends.append(send)
            if provider_message_id is not None and send.expects_report:
                self._by_id[provider_message_id] = send

    def report(self, provider_message_id: str) -> None:
        """A delivery report arrived for a send (unknown or forgotten ids are ignored)."""
        with self._lock:
            send = self._by_id.pop(provider_message_id, None)
            if send is not None:
                send.reported = True

    def probe(self, at: int, *, ok: bool) -> None:
        """A probe's result while the breaker is HALF_OPEN: `probes` passes close it, one failure reopens it."""
        with self._lock:
            self._last_probe = at
            self.breaker.record(Outcome.SUCCESS if ok else Outcome.FAILURE, at)

    def idle_probe_due(self, now: int) -> bool:
        """Whether an idle probe is due: nothing sent or probed for `idle_probe_every_ms`, and the breaker CLOSED
        or its probe due (an OPEN breaker waits out `open_ms`)."""
        with self._lock:
            times = ([self._sends[-1].at] if self._sends else []) + (
                [self._last_probe] if self._last_probe is not None else [])
            if times and now - max(times) < self.rules.idle_probe_every_ms:
                return False
            return self.breaker.state is BreakerState.CLOSED or self.probe_due(now)

    def idle_probe(self, at: int, *, ok: bool, reason: str = "") -> None:
        """An idle probe's result: HALF_OPEN, it is the breaker's probe; CLOSED, `idle_probe_failures` failures in
        a row trip the breaker (a pass resets the count). It is no send: the graded signals do not see it."""
        with self._lock:
            self.breaker.tick(at)
            if self.breaker.state is BreakerState.HALF_OPEN:
                self.probe(at, ok=ok)
                return
            self._last_probe = at
            if self.breaker.state is not BreakerState.CLOSED:
                return
            self._idle_failures = 0 if ok else self._idle_failures + 1
            if self._idle_failures >= self.rules.idle_probe_failures:
                self._idle_failures = 0
                self.breaker.trip(at, f"{self.rules.idle_probe_failures} idle probes failed: {reason}"[:300])

    def probe_due(self, now: int) -> bool:
        """Whether it is time for a probe (HALF_OPEN, and none within `probe_every_ms`)."""
        with self._lock:
            self.breaker.tick(now)
            return self.breaker.state is BreakerState.HALF_OPEN and (
                self._last_probe is None or now - self._last_probe >= self.rules.probe_every_ms)

    def signals(self, now: int) -> tuple[float | None, float | None, float | None]:
        """(success rate, p95 latency ms, report arrival rate) over the window since the last transition."""
        with self._lock:
            self._expire(now)
            sends = [s for s in self._sends if s.at >= self.breaker.since]
            if len(sends) < self.rules.min_sends:
                return None, None, None
            success = sum(s.ok for s in sends) / len(sends)
            latencies = sorted(s.latency_ms for s in sends)
            p95 = latencies[max(0, math.ceil(0.95 * len(latencies)) - 1)]
            due = [s for s in sends if s.expects_report and now - s.at >= self.rules.report_grace_ms]
            arrival = sum(s.reported for s in due) / len(due) if len(due) >= self.rules.min_sends else None
            return success, p95, arrival

    def state(self, now: int) -> ChannelState:
        """The channel's state now; a graded OPEN trips the breaker (OPEN for `open_ms`, then probes)."""
        with self._lock:
            self.breaker.tick(now)
            if self.breaker.state is not BreakerState.CLOSED:
                return ChannelState.OPEN
            success, p95, arrival = self.signals(now)
            graded = grade(success=success, p95_ms=p95, arrival=arrival, rules=self.rules)
            if graded is ChannelState.OPEN:
                self.breaker.trip(now, f"signals: success {_pct(success)}, p95 {_ms(p95)}, arrival {_pct(arrival)}")
            return graded

    def _expire(self, now: int) -> None:
        horizon = now - self.rules.window_ms
        while self._sends and self._sends[0].at < horizon:
            old = self._sends.popleft()
            if old.provider_message_id is not None and self._by_id.get(old.provider_message_id) is old:
                del self._by_id[old.provider_message_id]  # a report arriving after the window counts for nothing


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


EVERY_TENANT = "*"
"""The tenant of an idle probe's health when no tenant has sent to the destination yet."""


class Destinations:
    """One ChannelHealth per (tenant, destination), created on first use; the least recently used beyond
    `capacity` are forgotten (a forgotten destination starts afresh, CLOSED), so callers naming endless hosts
    cannot grow the instance's memory."""

    def __init__(self, rules: ChannelRules = ChannelRules(), *, capacity: int = 4096) -> None:
        self.rules = rules
        self._capacity = capacity
        self._health: OrderedDict[tuple[str, str], ChannelHealth] = OrderedDict()
        self._lock = threading.Lock()  # the send path and a metrics scrape (another thread) both use it

    def of(self, tenant: str, destination: str) -> ChannelHealth:
        """The health of `tenant`'s sends to `destination`."""
        key = (tenant, destination)
        with self._lock:
            health = self._health.get(key)
            if health is None:
                health = self._health[key] = ChannelHealth(self.rules)
                while len(self._health) > self._capacity:
                    self._health.popitem(last=False)
            else:
                self._health.move_to_end(key)
            return health

    def worst(self, now: int) -> ChannelHealth:
        """The health in the worst state now (OPEN before DEGRADED before HEALTHY): what the instance's board row
        and gauges show; a fresh one when nothing was sent yet."""
        with self._lock:
            items = list(self._health.values())
        graded = [(_ORDER[health.state(now)], -i, health) for i, health in enumerate(reversed(items))]
        return max(graded, key=lambda g: (g[0], g[1]))[2] if graded else ChannelHealth(self.rules)

    def idle(self, destination: str, now: int) -> list[ChannelHealth]:
        """The healths of `destination` (every tenant's) whose idle probe is due; when no tenant has sent there
        yet, the `*` entry (every tenant's, shown as `*/` on the board) stands for it."""
        with self._lock:
            known = [health for (_, dest), health in self._health.items() if dest == destination]
        if not known:
            known = [self.of(EVERY_TENANT, destination)]
        return [health for health in known if health.idle_probe_due(now)]

    def open(self, now: int) -> list[str]:
        """`tenant/destination` of every OPEN one (what the health board lists), sorted."""
        with self._lock:
            items = list(self._health.items())
        return sorted(f"{tenant}/{destination}" for (tenant, destination), health in items
                      if health.state(now) is ChannelState.OPEN)
