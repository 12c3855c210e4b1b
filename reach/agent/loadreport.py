"""The instance's load report on `<ns>.loads`: handlers running, backlog, queue bound and drain rate.

Sent about once a second and whenever inflight or backlog moved by more than 10% of
max_concurrency, but never more often than every `min_gap_ms`, so a busy instance does not publish
per message. An idle instance (nothing running or queued, as its last report said) repeats that report
every `idle_every_ms` (5 s) instead (decision 0073): the router's estimate of it is 0 either way, and a
message arriving moves inflight, which reports at once. The registration is not republished for it:
heartbeats stay at ttl/3.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from reach.agent.agent import Agent
from reach.envelopes import DELIVERY_TIMEOUT_MS, now_ms
from reach.kafka import codec
from reach.records import LoadReport, Policy

log = logging.getLogger("reach.agent")

Publish = Callable[[str, str, bytes], Any]
"""Publisher.send(topic, key, value): returns a future, or raises when the record cannot be queued."""

CHANGE_SHARE = 0.1


class DrainMeter:
    """How many completions per second the instance drains while its handlers are busy.

    Per window: completions x max_concurrency / (handler-seconds busy), which is max_concurrency /
    mean service time by Little's law: the completions/s of a full instance, measured without waiting
    for it to be full (an idle-looking rate would make the queue bound collapse the moment a burst
    arrives). A window lasts `window_ms` and until max_concurrency completions were seen (a slow
    handler's first seconds say nothing yet), at most 10 windows: then 0 when handlers ran and none
    finished. An idle window keeps the last estimate; None until the first window with work closed."""

    def __init__(self, *, capacity: int, window_ms: int = 3_000, clock: Callable[[], int] = now_ms) -> None:
        self._capacity = capacity
        self._window = window_ms
        self._clock = clock
        self._start = self._seen = clock()
        self._inflight = 0
        self._busy_ms = 0  # integral of handlers running over the window (handler-milliseconds)
        self._done = 0
        self._rate: float | None = None

    def observe(self, inflight: int) -> None:
        """The handlers running now (called often: every pass of the runner's loop)."""
        now = self._clock()
        self._busy_ms += self._inflight * (now - self._seen)
        self._seen, self._inflight = now, inflight
        elapsed = now - self._start
        if elapsed >= self._window and (self._done >= self._capacity or elapsed >= 10 * self._window):
            if self._busy_ms > 0:
                self._rate = self._done * self._capacity * 1000 / self._busy_ms if self._done else 0.0
            self._start, self._busy_ms, self._done = now, 0, 0

    def completed(self) -> None:
        self._done += 1

    def rate(self) -> float | None:
        return self._rate


class LoadReporter:
    """Decides when a report is due and publishes it (the runner calls `completed` and `tick`)."""

    def __init__(self, agent: Agent, *, publish: Publish, topic: str, policy: Callable[[str], Policy] | None = None,
                 every_ms: int = 1_000, min_gap_ms: int = 100, idle_every_ms: int = 5_000,
                 clock: Callable[[], int] = now_ms) -> None:
        self._agent = agent
        self._publish = publish
        self._topic = topic
        self._policy = policy
        self._every = every_ms
        self._idle_every = max(idle_every_ms, every_ms)
        self._min_gap = min_gap_ms
        self._clock = clock
        self.meter = DrainMeter(capacity=agent.max_concurrency, clock=clock)
        self._last: LoadReport | None = None
        self._failed = False

    @property
    def max_queue(self) -> int:
        """The queue bound in force (the last report's): how many received envelopes may wait for a handler."""
        if self._last is not None:
            return self._last.max_queue
        return self._agent.queue_bound(None, DELIVERY_TIMEOUT_MS)

    def completed(self) -> None:
        """One handler finished (whatever its outcome): it counts toward the drain rate."""
        self.meter.completed()

    def tick(self, *, inflight: int, queued: int) -> LoadReport | None:
        """Publish a report when one is due; returns it (None when not due)."""
        self.meter.observe(inflight)
        now = self._clock()
        last = self._last
        if last is not None:
            age = now - last.at
            step = CHANGE_SHARE * self._agent.max_concurrency
            moved = abs(inflight - last.inflight) > step or abs(queued - last.queued) > step
            idle = inflight == queued == last.inflight == last.queued == 0
            if age < self._min_gap or (age < (self._idle_every if idle else self._every) and not moved):
                return None
        drain = self.meter.rate()
        report = LoadReport(
            instance_id=self._agent.instance_id, agent_id=self._agent.agent_id, at=now, inflight=inflight,
            queued=queued, capacity=self._agent.max_concurrency,
            max_queue=self._agent.queue_bound(drain, self._delivery_timeout_ms()), drain_rate=drain,
        )
        self._last = report
        try:
            self._publish(self._topic, report.instance_id, codec.encode(report))
        except Exception as exc:  # noqa: BLE001 - a lost report only makes the router's view a second staler
            if not self._failed:
                log.warning("load report to %s not sent (the router falls back to heartbeats): %s", self._topic, exc)
            self._failed = True
        return report

    def _delivery_timeout_ms(self) -> int:
        """The shortest delivery timeout any of this agent's capabilities runs under (policy, else default)."""
        if self._policy is None:
            return DELIVERY_TIMEOUT_MS
        timeouts = [self._policy(name).delivery_timeout_ms for name in self._agent.capabilities]
        return min((t for t in timeouts if t), default=DELIVERY_TIMEOUT_MS)
