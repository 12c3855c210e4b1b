"""The one rule for how long a run may take: declared by the agent, shortened by the caller, capped by POLICY."""

from __future__ import annotations

import pytest

from reach.core.timeouts import (
    DEFAULT_EXECUTION_TIMEOUT_MS,
    MAX_TIMEOUT_MS,
    BadTimeout,
    RunClock,
    check_timeout_ms,
    effective_execution_timeout_ms,
    stretched,
    timeout_problem,
)
from reach.errors import ConfigError


@pytest.mark.parametrize(("declared", "asked", "cap", "effective"), [
    (30_000, 0, None, 30_000),       # the default envelope: the agent's declaration applies (no 8 s cut)
    (30_000, 5_000, None, 5_000),    # a caller may ask for less
    (30_000, 60_000, None, 30_000),  # ... never for more
    (30_000, 0, 3_000, 3_000),       # the POLICY cap wins over the declaration
    (30_000, 5_000, 3_000, 3_000),   # ... and over the ask
    (30_000, 5_000, 0, 5_000),       # a cap of 0 is no cap
    (0, 0, None, DEFAULT_EXECUTION_TIMEOUT_MS),  # a registration written before v4 declares none
])
def test_the_effective_timeout_is_the_least_of_what_is_set(declared: int, asked: int, cap: int | None,
                                                            effective: int) -> None:
    assert effective_execution_timeout_ms(declared, asked, cap) == effective


@pytest.mark.parametrize("bad", [-1, MAX_TIMEOUT_MS + 1, 2**40, 1.5, "30s", True, None])
def test_a_negative_absurd_or_non_integer_timeout_is_refused_with_the_range(bad: object) -> None:
    with pytest.raises(BadTimeout, match="from 1 to 3,600,000") as refused:
        check_timeout_ms(bad, what="execution_timeout_ms")
    assert isinstance(refused.value, ConfigError), "the CLI maps it to exit 2"
    assert "execution_timeout_ms" in str(refused.value) and repr(bad) in str(refused.value)


def test_zero_means_not_set_only_where_it_is_optional() -> None:
    assert check_timeout_ms(0, what="ask", optional=True) == 0
    with pytest.raises(BadTimeout):
        check_timeout_ms(0, what="declared")
    assert timeout_problem(0, what="ask") is None and timeout_problem(1_000, what="ask") is None
    assert "ask must be" in (timeout_problem(-5, what="ask") or "")


def test_the_slow_stretch_applies_to_an_ask_and_leaves_an_unset_one_unset() -> None:
    assert stretched(1_500, 2.0) == 3_000
    assert stretched(0, 2.0) == 0
    assert stretched(1_500, 1.0) == 1_500
    assert stretched(MAX_TIMEOUT_MS, 2.0) == MAX_TIMEOUT_MS


def test_heartbeats_move_the_deadline_both_ways_and_never_past_the_limit() -> None:
    clock = RunClock.start(started_ms=1_000, timeout_ms=30_000, heartbeat_ms=10_000, cap_ms=None, deadline=120_000)
    assert clock.due_at == 31_000 and not clock.by_heartbeat
    early = clock.beat(2_000)
    assert early.due_at == 12_000 and early.by_heartbeat, "a heartbeating handler that goes quiet is cut sooner"
    late = early.beat(29_000)
    assert late.due_at == 39_000, "a handler that keeps beating runs past its execution timeout"
    assert late.beat(115_000).due_at == 120_000, "never past the message's deadline"


def test_the_policy_cap_bounds_what_heartbeats_can_extend() -> None:
    clock = RunClock.start(started_ms=0, timeout_ms=3_000, heartbeat_ms=10_000, cap_ms=3_000, deadline=45_000)
    assert clock.beat(2_500).due_at == 3_000


def test_without_a_deadline_or_cap_heartbeats_are_unbounded() -> None:
    clock = RunClock.start(started_ms=0, timeout_ms=1_000, heartbeat_ms=500, cap_ms=None, deadline=None)
    assert clock.limit_at is None and clock.beat(10_000).due_at == 10_500
