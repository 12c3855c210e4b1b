"""Session affinity as a bounded map (reach.core.sessionmap): sticks until idle past the TTL, bounded LRU, records
written on start / change / a quarter TTL, and what is read back from the sessions topic."""

from __future__ import annotations

import pytest

from reach.core.sessionmap import SessionMap, decode, encode


def test_a_record_is_worth_writing_on_start_on_change_and_every_quarter_ttl() -> None:
    sessions = SessionMap(ttl_ms=400)
    assert sessions.set("s", "i1", 0) is True
    assert [sessions.set("s", "i1", t) for t in (10, 50, 99)] == [False] * 3
    assert sessions.set("s", "i1", 100) is True, "a quarter of the TTL since the last record"
    assert sessions.set("s", "i1", 150) is False
    assert sessions.set("s", "i2", 151) is True, "another instance"
    assert sessions.set(None, "i1", 1) is False and len(sessions) == 1


def test_learning_keeps_the_newest_and_drops_the_idle() -> None:
    sessions = SessionMap(ttl_ms=1_000)
    assert sessions.learn("s", "i1", 5_000, now_ms=5_500)
    assert not sessions.learn("s", "i0", 4_900, now_ms=5_500), "an older record never replaces a newer one"
    assert not sessions.learn("s", "i1", 5_000, now_ms=5_500), "its own record read back"
    assert sessions.get("s", 5_600) == "i1"
    assert not sessions.learn("t", "i1", 1_000, now_ms=5_500), "idle past the TTL when read back"
    assert sessions.get("t", 5_500) is None
    assert sessions.get("s", 6_001) is None and len(sessions) == 0, "expires with its idle time"
    assert sessions.set("s", "i1", 6_002) is True, "a session back after it expired starts again"


def test_the_map_is_bounded_least_recently_used_first() -> None:
    sessions = SessionMap(max_sessions=2)
    sessions.learn("a", "i1", 1, now_ms=1)
    sessions.set("b", "i1", 2)
    sessions.set("a", "i1", 3)
    sessions.learn("c", "i2", 4, now_ms=4)
    assert len(sessions) == 2 and sessions.get("b", 5) is None and sessions.get("a", 5) == "i1"
    sessions.forget("a")
    assert sessions.get("a", 5) is None


def test_records_round_trip_and_bad_ones_are_refused() -> None:
    assert decode(encode("i-1", 42)) == ("i-1", 42)
    for bad in (b"[]", b'{"instance_id": "", "seen_at": 1}', b'{"instance_id": "i", "seen_at": "1"}',
                b'{"instance_id": "i", "seen_at": true}', b"not json"):
        with pytest.raises(ValueError):
            decode(bad)


def test_a_session_key_is_scoped_by_an_escaped_tenant_and_a_record_names_its_tenant() -> None:
    from reach.core.sessionmap import Record, decode_record, scoped

    assert scoped("acme", "s") == "acme/s" and scoped("acme", None) is None
    assert scoped("a/b", "c") != scoped("a", "b/c"), "a tenant's / is escaped: no two sessions share a key"
    assert decode_record(encode("i-1", 42, "acme")) == Record("i-1", 42, "acme")
    assert decode_record(encode("i-1", 42)) == Record("i-1", 42, None)
    assert Record("i", 1, "acme").belongs("acme/s") and not Record("i", 1, "acme").belongs("evil/s")
    assert not Record("i", 1, None).belongs("acme/s"), "a record from before sessions were scoped"


def test_one_tenants_fresh_keys_evict_its_own_sessions_not_another_tenants() -> None:
    from reach.core.sessionmap import scoped
    sessions = SessionMap(max_sessions=4)
    a = scoped("tenant-a", "conversation")
    sessions.set(a, "i-a", 1)
    for n in range(10):  # tenant B floods the table with fresh session keys
        sessions.set(scoped("tenant-b", f"s{n}"), "i-b", 2 + n)
    assert len(sessions) == 4
    assert sessions.get(a, 20) == "i-a", "tenant A's session keeps its instance"
    assert sessions.get(scoped("tenant-b", "s9"), 20) == "i-b" and sessions.get(scoped("tenant-b", "s0"), 20) is None


def test_snapshots_are_bounded_in_bytes_and_their_sessions_keep_their_instance() -> None:
    from reach.core.sessionmap import scoped
    snapshot = '{"notes": "' + "x" * 90 + '"}'  # 103 bytes
    sessions = SessionMap(max_snapshot_bytes=250)
    keys = [scoped("t", f"s{n}") for n in range(3)]
    for n, key in enumerate(keys):
        sessions.learn(key, "i1", 10 + n, now_ms=10 + n, snapshot=snapshot, snapshot_at=10 + n)
    assert sessions.snapshot_bytes() <= 250
    assert sessions.snapshot(keys[0], 20) == (None, 0), "the least recently used snapshot went"
    assert sessions.get(keys[0], 20) == "i1", "its session keeps its instance"
    assert sessions.snapshot(keys[2], 20) == (snapshot, 12)
    sessions.forget(keys[2])
    assert sessions.snapshot_bytes() == len(snapshot)
