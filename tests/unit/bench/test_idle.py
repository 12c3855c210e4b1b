"""The idle row's arithmetic: CPU seconds between two readings as a share of one core, children included."""

from __future__ import annotations

from reach.tooling.bench.idle import percent_of_a_core


def test_a_process_and_its_children_count_under_its_label() -> None:
    before = {"router": 10.0, "router/42": 1.0, "agent": 5.0, "broker JVM": None}
    after = {"router": 10.6, "router/42": 1.3, "agent": 5.3, "broker JVM": None}
    shares = percent_of_a_core(before, after, elapsed=30.0)
    assert shares == {"router": 3.0, "agent": 1.0, "broker JVM": None}


def test_a_child_started_in_between_counts_from_zero() -> None:
    assert percent_of_a_core({"agent": 1.0}, {"agent": 1.0, "agent/7": 0.15}, elapsed=10.0) == {"agent": 1.5}
