"""The status fold under any arrival order, duplicates and UNKNOWN steps: one terminal status per generation."""

from __future__ import annotations

from functools import reduce

from hypothesis import given
from hypothesis import strategies as st

from reach.core.lifecycle import StatusRow, fold
from reach.records import Receipt, Status

receipts = st.builds(
    lambda status, generation, attempt, at: Receipt(
        message_id="m1", generation=generation, trace_id="t1", tenant="acme", capability="demo.echo",
        status=status, attempt=attempt, at=at,
    ),
    st.sampled_from(list(Status)), st.integers(0, 1), st.integers(1, 3), st.integers(0, 50),
)


@given(arrivals=st.lists(receipts, min_size=1, max_size=12).flatmap(
    lambda rs: st.lists(st.sampled_from(rs), min_size=len(rs), max_size=2 * len(rs))))  # with redeliveries
def test_the_first_terminal_of_the_newest_generation_wins(arrivals: list[Receipt]) -> None:
    row = reduce(fold, arrivals, None)
    assert isinstance(row, StatusRow)
    newest = max(r.generation for r in arrivals)
    assert row.generation == newest
    ours = [r for r in arrivals if r.generation == newest]
    terminals = [r for r in ours if r.status.is_terminal]
    if terminals:
        assert (row.status, row.terminal_at) == (terminals[0].status, terminals[0].at)
    else:
        assert not row.status.is_terminal and row.terminal_at is None
    if row.status is Status.UNKNOWN:
        assert ours[0].status is Status.UNKNOWN, "an unknown step never replaces a known status"
    # PROGRESS (v7) updates the row's progress, never its timeline (reach.core.lifecycle)
    steps = {(r.generation, r.attempt, r.status, r.at) for r in arrivals if r.status is not Status.PROGRESS}
    assert {(s.generation, s.attempt, s.status, s.at) for s in row.timeline} == steps
