"""A session's snapshot in the session map (pure): learned apart from where the session sticks, newest wins."""

from __future__ import annotations

import pytest

from reach.core.sessionmap import MAX_SNAPSHOT_BYTES, Record, SessionMap, decode_record, encode


def test_a_newer_snapshot_is_learned_even_from_a_record_whose_instance_is_older() -> None:
    sessions = SessionMap(ttl_ms=10_000)
    sessions.set("s", "i1", 1_000)
    assert sessions.learn("s", "i2", 900, now_ms=1_100, snapshot='{"a":1}', snapshot_at=900)
    assert sessions.get("s", 1_100) == "i1", "the session still sticks where it was routed last"
    assert sessions.snapshot("s", 1_100) == ('{"a":1}', 900)
    assert not sessions.learn("s", "i2", 800, now_ms=1_100, snapshot='{"a":0}', snapshot_at=800), "an older one"
    sessions.set("s", "i3", 1_200)
    assert sessions.snapshot("s", 1_200) == ('{"a":1}', 900), "routing keeps the snapshot"
    assert sessions.snapshot("s", 20_000) == (None, 0), "it idles out with the session"


def test_a_record_carries_its_snapshot_and_a_bad_one_is_refused() -> None:
    value = encode("i", 5, "acme", snapshot='{"n":1}', snapshot_at=5)
    assert decode_record(value) == Record("i", 5, "acme", '{"n":1}', 5)
    assert decode_record(encode("i", 5, "acme")).snapshot is None
    with pytest.raises(ValueError, match="snapshot"):
        decode_record(encode("i", 5, "acme", snapshot="x" * (MAX_SNAPSHOT_BYTES + 1), snapshot_at=5))
