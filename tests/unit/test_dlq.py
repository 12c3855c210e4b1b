"""Dead-letter selection and replay decisions: safe to run twice, completed ones skipped."""

from __future__ import annotations

from reach import dlq
from reach.core.lifecycle import StatusRow, fold
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.records import Envelope, Receipt, Status


def make_letter(env: Envelope, offset: int, *, reason: str = dlq.RETRIES_EXHAUSTED, ts: int = 1_000) -> dlq.Letter:
    raw, headers = dlq.letter(codec.encode(env), reason=reason, error=None, origin=("ns.cap.demo.echo", 0, offset),
                              envelope=env)
    assert ("x-reach-origin-offset", str(offset).encode()) in headers
    item = dlq.parse(0, offset, ts, raw)
    assert item is not None
    return item


def row(env: Envelope, status: Status, generation: int = 0) -> StatusRow:
    return fold(None, Receipt(message_id=env.message_id, generation=generation, trace_id=env.trace_id, tenant="d",
                              capability=env.capability, status=status, at=1))


def test_letter_keeps_the_original_bytes_and_provenance() -> None:
    env = new_envelope("demo.echo", {"x": 1})
    item = make_letter(env, 7)
    assert codec.decode(item.record.envelope, Envelope) == env
    assert (item.record.origin_offset, item.id, item.message_id) == (7, "0:7", env.message_id)
    assert dlq.parse(0, 8, 0, b"garbage") is None


def test_replayed_envelope_keeps_ids_and_gets_a_fresh_budget() -> None:
    env = new_envelope("demo.echo", {}, budget_ms=5_000).model_copy(update={"attempt": 4, "excluded_instances": ["i"]})
    again = dlq.replayed(env, 0, now=env.created_at + 60_000)
    assert (again.message_id, again.trace_id, again.idempotency_key) == (env.message_id, env.trace_id,
                                                                         env.idempotency_key)
    assert (again.attempt, again.generation, again.excluded_instances) == (1, 1, [])
    assert again.deadline - again.created_at == 5_000 and again.created_at == env.created_at + 60_000
    assert dlq.replayed(env, 0, now=0, to_capability="demo.other").capability == "demo.other"


def test_replay_skips_completed_and_already_replayed_and_is_rate_limited() -> None:
    done, again, fresh = (new_envelope("demo.echo", {"n": n}) for n in range(3))
    letters = [make_letter(done, 1), make_letter(again, 2), make_letter(fresh, 3)]
    rows = {done.message_id: row(done, Status.COMPLETED), again.message_id: row(again, Status.ROUTED, 1)}
    published: list[Envelope] = []
    sleeps: list[float] = []
    summary = dlq.replay(letters, lookup=rows.get, publish=published.append, dry_run=False, rate=4,
                         sleep=sleeps.append)
    assert summary.replayed == [fresh.message_id]
    assert summary.skipped_completed == [done.message_id]
    assert summary.skipped_in_progress == [again.message_id]
    assert [e.generation for e in published] == [1] and sleeps == [0.25]


def test_dry_run_publishes_nothing_and_bad_envelopes_are_reported() -> None:
    env = new_envelope("demo.echo", {})
    raw, _ = dlq.letter(b"\x00not-avro", reason=dlq.UNDECODABLE, error=None, origin=("t", 0, 0))
    bad = dlq.parse(0, 0, 0, raw)
    assert bad is not None and bad.envelope is None
    published: list[Envelope] = []
    summary = dlq.replay([make_letter(env, 1), bad], lookup=lambda _: None, publish=published.append,
                         dry_run=True, rate=None)
    assert published == [] and summary.replayed == [env.message_id]
    assert summary.failed and "does not decode" in summary.failed[0][1]


def test_filters_and_latest_generation_per_message() -> None:
    env = new_envelope("demo.echo", {})
    old = make_letter(env, 1, ts=100)
    newer = dlq.parse(0, 2, 200, codec.encode(old.record.model_copy(update={"generation": 1})))
    assert newer is not None
    assert dlq.latest_per_message([old, newer]) == [newer]
    assert dlq.Filters(capability="demo.echo", since_ms=150).match(newer)
    assert not dlq.Filters(reason=dlq.NO_ROUTE).match(newer)
    assert dlq.Filters(ids=frozenset(["0:1"])).match(old) and not dlq.Filters(ids=frozenset(["0:1"])).match(newer)


def test_the_ledger_makes_replay_safe_to_run_twice_after_the_status_rows_expired() -> None:
    env = new_envelope("demo.echo", {"x": 1})
    item = make_letter(env, 3)
    ledger: set[str] = set()
    published: list[Envelope] = []

    def record(letter: dlq.Letter) -> None:
        ledger.add(dlq.ledger_key(letter.message_id or letter.id, letter.record.generation))

    for _ in range(2):  # no status row at all: it expired after 7 days while the letter lives 30
        dlq.replay([item], lookup=lambda _: None, publish=published.append, dry_run=False, rate=None,
                   ledger=set(ledger), record=record)
    assert [e.message_id for e in published] == [env.message_id], "replayed once"
    key, value = dlq.ledger_entry(item, now=5)
    assert key == f"{env.message_id}:0" and b'"replayed_generation": 1' in value


def test_a_letter_by_reference_is_replayed_from_its_original_bytes() -> None:
    env = new_envelope("demo.echo", {"x": 1})
    raw, _ = dlq.letter(b"", reason="OVERSIZE", error=None, origin=("ns.cap.demo.echo", 1, 9), message_id="m")
    item = dlq.parse(0, 4, 1, raw)
    assert item is not None and item.by_reference and item.envelope is None
    full = item.with_original(codec.encode(env))
    assert full.envelope == env and not full.by_reference
    assert not make_letter(env, 1).by_reference
