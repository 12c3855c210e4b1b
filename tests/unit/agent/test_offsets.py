"""The offset tracker commits only the acknowledged prefix of each partition."""

from __future__ import annotations

import pytest

from reach.agent.offsets import OffsetTracker


def test_commit_waits_for_the_earliest_offset() -> None:
    t = OffsetTracker()
    for off in (10, 11, 12):
        t.add(0, off)
    t.done(0, 12)
    t.done(0, 11)
    assert t.advanced() == {}
    assert t.pending(0) == 1
    t.done(0, 10)
    assert t.advanced() == {0: 13}
    assert t.advanced() == {}
    assert t.pending() == 0


def test_partitions_are_independent() -> None:
    t = OffsetTracker()
    t.add(0, 5)
    t.add(1, 7)
    t.add(1, 8)
    t.done(1, 7)
    assert t.advanced() == {1: 8}
    t.done(0, 5)
    t.done(1, 8)
    assert t.advanced() == {0: 6, 1: 9}


def test_gaps_from_compaction_or_filtering_are_fine() -> None:
    t = OffsetTracker()
    t.add(0, 3)
    t.add(0, 9)
    t.done(0, 9)
    t.done(0, 3)
    assert t.advanced() == {0: 10}


def test_forgotten_partitions_ignore_late_completions() -> None:
    t = OffsetTracker()
    t.add(2, 1)
    t.forget([2])
    t.done(2, 1)
    assert t.advanced() == {}
    t.add(2, 1)  # reassigned later: starts afresh
    t.done(2, 1)
    assert t.advanced() == {2: 2}


def test_offsets_must_increase() -> None:
    t = OffsetTracker()
    t.add(0, 4)
    with pytest.raises(ValueError):
        t.add(0, 4)


def test_a_stale_completion_of_a_finished_offset_is_ignored() -> None:
    t = OffsetTracker()
    t.add(0, 1)
    t.done(0, 1)
    t.done(0, 1)  # e.g. an older run of the same message finishing after a revoke/reassign
    t.add(0, 2)
    assert t.advanced() == {0: 2}
    assert t.pending(0) == 1
