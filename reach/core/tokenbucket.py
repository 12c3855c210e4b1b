"""A token bucket (pure): `rate` tokens per second, at most `burst` held; the router's qps_limit and the
gateway's in-memory quota fake share it (the gateway's replicas share a Redis bucket of the same rule)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TokenBucket:
    """Starts full. `take(now)` spends one token and returns 0.0, or returns the seconds until one is there."""

    rate: float
    burst: float
    tokens: float = field(default=-1.0)
    stamp: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if not self.rate > 0 or not self.burst >= 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1; got rate={self.rate} burst={self.burst}")
        if self.tokens < 0:
            self.tokens = float(self.burst)

    def _fill(self, now: float) -> None:
        if self.stamp >= 0 and now > self.stamp:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
        if now > self.stamp:
            self.stamp = now

    def peek(self, now: float, n: float = 1.0) -> float:
        """Seconds until `n` tokens are there (0.0 when they are), without spending."""
        self._fill(now)
        return 0.0 if self.tokens >= n else (n - self.tokens) / self.rate

    def take(self, now: float, n: float = 1.0) -> float:
        """Spend `n` tokens when there are enough (returns 0.0); else spend nothing and return the wait."""
        wait = self.peek(now, n)
        if wait == 0.0:
            self.tokens -= n
        return wait
