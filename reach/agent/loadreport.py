"""The instance's load report on `<ns>.loads`: handlers running, backlog, queue bound and drain rate.

Sent about once a second and whenever inflight or backlog moved by more than 10% of
max_concurrency, but never more often than every `min_gap_ms`, so a busy instance does not publish
per message. The registration is not republished for it: heartbeats stay at ttl/3.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from reach import codec
from reach.agent.agent import Agent
from reach.envelopes import DELIVERY_TIMEOUT_MS, now_ms
from reach.records import LoadReport, Policy

log = logging.getLogger("reach.agent")

Publish = Callable[[str, str, bytes], Any]
"""Publisher.send(topic, key, value): returns a future, or raises when the record cannot be queued."""

CHANGE_SHARE = 0.1


class DrainMeter:
    """Completions per second over a sliding window; None until one whole window was watched."""

    def __init__(self, *, window_ms: int = 3_000, clock: Callable[[], int] = now_ms) -> None:
        self._window = window_ms
        self._clock = clock
        self._since = clock()
        self._done: deque[int] = deque()

    def completed(self) -> None:
        self._done.append(self._clock())

    def rate(self) -> float | None:
        now = self._clock()
        while self._done and self._done[0] <= now - self._window:
            self._done.popleft()
        if now - self._since < self._window:
            return None
        return len(self._done) * 1000 / self._window


class LoadReporter:
    """Decides when a report is due and publishes it (the runner calls `completed` and `tick`)."""

    def __init__(self, agent: Agent, *, publish: Publish, topic: str, policy: Callable[[str], Policy] | None = None,
                 every_ms: int = 1_000, min_gap_ms: int = 100, clock: Callable[[], int] = now_ms) -> None:
        self._agent = agent
        self._publish = publish
        self._topic = topic
        self._policy = policy
        self._every = every_ms
        self._min_gap = min_gap_ms
        self._clock = clock
        self.meter = DrainMeter(clock=clock)
        self._last: LoadReport | None = None
        self._failed = False

    def completed(self) -> None:
        """One handler finished (whatever its outcome): it counts toward the drain rate."""
        self.meter.completed()

    def tick(self, *, inflight: int, queued: int) -> LoadReport | None:
        """Publish a report when one is due; returns it (None when not due)."""
        now = self._clock()
        last = self._last
        if last is not None:
            age = now - last.at
            step = CHANGE_SHARE * self._agent.max_concurrency
            moved = abs(inflight - last.inflight) > step or abs(queued - last.queued) > step
            if age < self._min_gap or (age < self._every and not moved):
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
