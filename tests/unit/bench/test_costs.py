"""Per-request cost figures from two server-side readings (no broker or Redis: readings are values)."""

from __future__ import annotations

from reach.tooling.bench.costs import Reading, per_request


def test_requests_per_request_by_type_with_the_rest_under_other() -> None:
    before = Reading(broker={"Produce": 100, "Fetch": 50, "OffsetCommit": 10, "JoinGroup": 3},
                     redis={"evalsha": 40, "set": 2, "info": 9, "used_memory_bytes": 1_000_000})
    after = Reading(broker={"Produce": 400, "Fetch": 250, "OffsetCommit": 30, "JoinGroup": 3, "ListOffsets": 20},
                    redis={"evalsha": 640, "set": 202, "info": 11, "used_memory_bytes": 1_400_000})
    got = per_request(before, after, 100)
    assert got["broker_requests_per_request"] == 5.4  # (300 + 200 + 20 + 20) / 100
    assert got["broker_Produce_per_request"] == 3.0 and got["broker_Fetch_per_request"] == 2.0
    assert got["broker_OffsetCommit_per_request"] == 0.2 and got["broker_other_per_request"] == 0.2
    assert got["redis_commands_per_request"] == 8.0  # the readings' own INFO calls are not the traffic's
    assert got["redis_bytes_per_1k_requests"] == 4_000_000


def test_an_unreadable_side_is_absent_not_zero() -> None:
    got = per_request(Reading(redis={"get": 1}), Reading(redis={"get": 11}), 10)
    assert "broker_requests_per_request" not in got and got["redis_commands_per_request"] == 1.0
    assert per_request(Reading(), Reading(), 0) == {}
