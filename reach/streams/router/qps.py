"""qps_limit per instance (no Kafka): one token bucket per limited instance, at this worker's share of the limit.

The router's workers share the capability topics by partition, so each sees about 1/N of the
traffic; each enforces `qps_limit / N` with N the members of the router group it last saw (1 until
it has looked). The sum is the declared limit while the traffic spreads over the partitions; a hot
session key on one worker's partition meets that worker's share of the limit, never more than it.
"""

from __future__ import annotations

from collections.abc import Iterable

from reach.core.tokenbucket import TokenBucket
from reach.records import AgentRegistration


class QpsLimits:
    """Token buckets by instance_id; `now` is seconds on a monotonic clock."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, TokenBucket]] = {}
        self.workers = 1

    def _bucket(self, registration: AgentRegistration) -> TokenBucket | None:
        limit = registration.qps_limit
        if limit is None or not limit > 0:
            return None
        rate = limit / max(self.workers, 1)
        found = self._buckets.get(registration.instance_id)
        if found is None or found[0] != rate:
            if len(self._buckets) > 10_000:
                self._buckets.clear()  # instances come and go; a fresh bucket starts full, which is the default
            found = self._buckets[registration.instance_id] = (rate, TokenBucket(rate=rate, burst=max(rate, 1.0)))
        return found[1]

    def throttled(self, registrations: Iterable[AgentRegistration], now: float) -> dict[str, int]:
        """Instances whose bucket is empty now -> ms until it has a token."""
        out: dict[str, int] = {}
        for reg in registrations:
            if reg.qps_limit is None:
                continue
            bucket = self._bucket(reg)
            wait = bucket.peek(now) if bucket is not None else 0.0
            if wait > 0:
                out[reg.instance_id] = max(int(wait * 1000 + 0.999), 1)
        return out

    def take(self, registration: AgentRegistration, now: float) -> None:
        """Spend the token of a request routed to the instance."""
        bucket = self._bucket(registration)
        if bucket is not None:
            bucket.take(now)
