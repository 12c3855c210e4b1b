"""qps_limit buckets: each worker enforces its share of an instance's limit."""

from __future__ import annotations

from reach.streams.router.qps import QpsLimits
from tests.unit.routing_fixtures import reg


def test_the_limit_refills_over_time() -> None:
    limits = QpsLimits()
    limited = reg("a", qps_limit=4)
    for _ in range(4):
        assert limits.throttled([limited], 10.0) == {}
        limits.take(limited, 10.0)
    assert limits.throttled([limited], 10.0) == {"a": 250}
    assert limits.throttled([limited], 10.25) == {}


def test_each_worker_takes_its_share_of_the_limit() -> None:
    limits = QpsLimits()
    limits.workers = 4
    limited = reg("a", qps_limit=8)
    limits.take(limited, 0.0)
    limits.take(limited, 0.0)
    assert limits.throttled([limited], 0.0) == {"a": 500}, "8/s over 4 workers: 2/s here"


def test_instances_without_a_limit_are_never_throttled() -> None:
    limits = QpsLimits()
    free = reg("b")
    for _ in range(1_000):
        limits.take(free, 0.0)
    assert limits.throttled([free], 0.0) == {}
