"""The generated Envelope writer (reach.kafka.avrogen) writes exactly the codec's bytes, and steps aside when the
codec must write (an older release pinned by REACH_RECORDS_WRITE_AS)."""

from __future__ import annotations

import random

import pytest

from reach.envelopes import new_envelope
from reach.kafka import avrogen, codec, writeas
from reach.records import Envelope


def _envelopes(n: int) -> list[Envelope]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        maybe = lambda value: value if rng.random() < 0.5 else None  # noqa: E731 - a coin per field
        out.append(new_envelope(
            rng.choice(["a.b", "demo.echo", "billing.refund"]), rng.choice([{"i": i}, b"\x00\xff" * i, "é" * i]),
            version=rng.choice(["*", "^1.2"]), session_key=maybe(f"s{i}"), region=maybe("eu"),
            tags=rng.choice([None, ["x"], ["x", "ü"]]), priority=rng.randint(-5, 5),
            tenant=rng.choice(["default", "t"]),
            parent_id=maybe("p"), intent=maybe("find ß"), budget_ms=rng.randint(1, 10**7),
            execution_timeout_ms=rng.choice([0, 60_000]), expire_at=maybe(1_900_000_000_000 + i),
            max_attempts=rng.randint(0, 9), reply_to=maybe("ns.replies.c"), callback=maybe('{"channel":"w"}'),
            headers=rng.choice([None, {"h": "v"}, {"a": "1", "b": "2"}]), session_snapshot=maybe("t:k"),
            max_tokens=maybe(rng.randint(0, 1 << 40)), max_cost_micros=maybe(rng.randint(0, 10**9))))
    return out


def test_the_compiled_writer_writes_the_codecs_bytes() -> None:
    writer = avrogen.compiled(Envelope, avrogen._envelope_samples())  # noqa: SLF001 - its own samples
    assert writer is not None
    for envelope in _envelopes(300):
        assert writer.encode(envelope) == codec.default_codec().encode(envelope)
        assert codec.decode(avrogen.encode(envelope), Envelope) == envelope


def test_a_pinned_release_is_written_by_the_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    envelope = _envelopes(1)[0]
    today = avrogen.encode(envelope)
    monkeypatch.setattr(writeas, "_applied", None)
    writeas.use("Envelope=3")
    try:
        pinned = avrogen.encode(envelope)
        assert pinned == codec.default_codec().encode(envelope) != today
    finally:
        writeas.use(None)
    assert avrogen.encode(envelope) == today


def test_a_schema_it_does_not_know_is_left_to_the_codec() -> None:
    schema = {"type": "record", "name": "Two", "fields": [{"name": "x", "type": ["string", "long"]}]}
    with pytest.raises(avrogen.Unsupported):
        avrogen.writer(schema)  # a union of two non-null types
