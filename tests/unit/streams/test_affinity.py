"""Session affinity: a session sticks to its instance until its TTL passes; the table is bounded."""

from __future__ import annotations

from reach.streams.router.affinity import AffinityTable


def test_a_session_sticks_until_its_ttl_passes() -> None:
    table = AffinityTable(ttl_ms=100)
    table.set("s1", "i1", 1_000)
    assert table.get("s1", 1_100) == "i1"
    assert table.get("s1", 1_101) is None
    assert table.get(None, 1_000) is None and table.get("", 1_000) is None


def test_no_session_key_is_not_remembered() -> None:
    table = AffinityTable()
    table.set(None, "i1", 1)
    table.set("", "i1", 1)
    assert len(table) == 0


def test_the_oldest_sessions_are_dropped_beyond_the_bound() -> None:
    table = AffinityTable(max_sessions=2)
    table.set("a", "i1", 1)
    table.set("b", "i1", 2)
    table.set("a", "i2", 3)  # refreshes a: b is now the oldest
    table.set("c", "i1", 4)
    assert len(table) == 2 and table.get("b", 5) is None and table.get("a", 5) == "i2"


def test_the_next_turn_of_a_conversation_prefers_the_instance_that_asked() -> None:
    from reach.core.turns import PREFER_HEADER
    from reach.streams.router.affinity import sticky

    table = AffinityTable()
    assert sticky(table, "m-1", {PREFER_HEADER: "i-asked"}, 0) == "i-asked"
    table.set("m-1", "i-serving", 0)
    assert sticky(table, "m-1", {PREFER_HEADER: "i-asked"}, 1) == "i-serving"  # the table's, once it has one
    assert sticky(table, None, {PREFER_HEADER: "i-asked"}, 1) is None and sticky(table, "m-2", None, 1) is None
