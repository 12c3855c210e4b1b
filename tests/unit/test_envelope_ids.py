"""Envelope ids and the prototype path of new_envelope: ULIDs python-ulid reads back, monotonic within a
millisecond; trace ids as python-ulid decodes them; repeated envelopes are fresh copies, checked like the first."""

from __future__ import annotations

import pytest
from ulid import ULID

from reach import tracing
from reach.envelopes import PayloadTooLarge, new_envelope, new_id
from reach.errors import ReachError


def test_ids_are_ulids_in_order() -> None:
    ids = [new_id() for _ in range(5_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for text in ids[::50]:
        assert str(ULID.from_str(text)) == text
    assert abs(ULID.from_str(new_id()).milliseconds - ULID().milliseconds) < 5_000


def test_trace_ints_are_python_ulids_values() -> None:
    for text in [new_id() for _ in range(200)] + [str(ULID()) for _ in range(200)]:
        assert tracing.trace_int(text) == int(ULID.from_str(text))
    # not canonical ULIDs: the slow path decides, as before
    assert tracing.trace_int("0" * 32) == 1
    assert tracing.trace_int("f" * 32) == int("f" * 32, 16)
    assert tracing.trace_int("not a ulid") == tracing.trace_int("not a ulid") > 1


def test_a_repeated_envelope_is_a_fresh_copy() -> None:
    first = new_envelope("demo.echo", {"i": 1}, tags=["a"], headers={"h": "v"}, budget_ms=9_000)
    second = new_envelope("demo.echo", b"\x00", tags=["a"], headers={"h": "v"}, budget_ms=9_000, trace_id="tr")
    assert second.message_id != first.message_id and second.idempotency_key == second.message_id
    assert second.trace_id == "tr" and second.payload == b"\x00" and second.content_type == "application/octet-stream"
    assert second.deadline == second.created_at + 9_000
    assert second.routing == first.routing and second.headers == first.headers == {"h": "v"}
    assert second.routing.tags is not first.routing.tags and second.headers is not first.headers
    assert second.excluded_instances is not first.excluded_instances
    other = new_envelope("demo.echo", {"i": 1}, tags=["b"])
    assert other.routing.tags == ["b"] and other.headers == {}


def test_a_repeated_bad_request_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ReachError):
            new_envelope("Not A Capability", {})
    new_envelope("demo.echo", {"x": 1})
    with pytest.raises(PayloadTooLarge):
        new_envelope("demo.echo", {"x": "y" * 300_000})
