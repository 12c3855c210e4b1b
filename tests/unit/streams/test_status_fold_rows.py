"""The status fold's row path on dicts (docs/decisions/0050): rows an older version wrote stay readable and are
folded, the indexes follow rows the fold hands the store already parsed, the changelog carries the model's
JSON, and an ending that carries its start (no STARTED receipt, 0055) reads as routed -> started -> completed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from reach.core.lifecycle import STARTED_AT, StatusRow
from reach.kafka import codec
from reach.kafka import headers as H
from reach.records import Decision, Receipt, Status
from reach.streams.status import keys
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, fold_batch
from tests.unit.streams.test_status_fold import NAMES, OWNED, REPLIES, Producer, receipt, status_fold


def _older_row(mid: str) -> bytes:
    """A ROUTED row as a version before v5 wrote it: no callback, progress, envelope_at, fallback, input, turns,
    usage, fan-out or children's usage, and steps without a channel."""
    return json.dumps({
        "message_id": mid, "trace_id": "t1", "tenant": "d", "capability": "demo.echo", "generation": 0,
        "status": "ROUTED", "attempt": 1, "agent_id": None, "instance_id": "i1", "last_error": None, "result": None,
        "terminal_at": None, "updated_at": 900, "deadline": 10**13, "delivery_due_at": 60_900,
        "inbox": ["ns.inbox.demo", 0, 7], "routed_instance": "i1", "reroutes": 0,
        "timeline": [{"generation": 0, "attempt": 1, "status": "ROUTED", "at": 900, "agent_id": None,
                      "instance_id": "i1", "error": None}],
        "dropped_steps": 3, "result_truncated": False, "reply_to": None, "replied": False, "pending_reply": None,
    }).encode()


def test_a_row_an_older_version_wrote_is_read_and_folded(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    fold._stores[0].write({"m1": _older_row("m1")})
    old = fold.row("m1")
    assert old is not None and old.status is Status.ROUTED and old.turns == [] and old.fanout is None

    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(1, "m1", Status.STARTED),
                                                                      receipt(2, "m1", Status.COMPLETED)]))
    row = fold.row("m1")
    assert row is not None and row.status is Status.COMPLETED and row.terminal_at == 1_002
    assert [s.status for s in row.timeline] == [Status.ROUTED, Status.STARTED, Status.COMPLETED]
    assert row.dropped_steps == 3, "what the older row knew is kept"
    [change] = producer.to(NAMES.status)
    assert change == row.model_dump_json().encode(), "the changelog carries the row in this version's shape"
    assert fold._stores[0].timed(keys.DUE, 10**14) == [] and fold._stores[0].timed(keys.TERMINAL, 2_000) == [
        (1_002, "m1")]
    sample = fold._metrics.registry.get_sample_value
    assert sample("agentreach_messages_terminal_total", {"capability": "demo.echo", "status": "COMPLETED"}) == 1
    assert sample("agentreach_deliveries_total", {"capability": "demo.echo", "outcome": "in_time"}) == 1
    assert sample("agentreach_undecodable_receipts_total") == 0


def test_the_indexes_follow_rows_the_fold_hands_over_parsed(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(0, "m1", Status.ROUTED),
                                                                      receipt(1, "m2", Status.ROUTED)]))
    store = fold._stores[0]
    assert store.rows == 2 and [mid for _, mid in store.timed(keys.DUE, 10**14)] == ["m1", "m2"]
    assert [mid for _, mid in store.trace("t1")] == ["m1", "m2"]
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(2, "m1", Status.STARTED),
                                                                      receipt(3, "m1", Status.COMPLETED)]))
    assert store.rows == 2 and [mid for _, mid in store.timed(keys.DUE, 10**14)] == ["m2"]
    assert store.timed(keys.TERMINAL, 10**14) == [(1_003, "m1")]
    rows = [StatusRow.model_validate_json(v) for v in producer.to(NAMES.status)]
    assert [(r.message_id, r.status) for r in rows] == [("m1", Status.ROUTED), ("m2", Status.ROUTED),
                                                         ("m1", Status.COMPLETED)]
    assert [json.loads(v) for v in producer.to(NAMES.status)] == [r.model_dump(mode="json") for r in rows]


def test_a_duplicate_receipt_writes_nothing(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(0, "m1", Status.COMPLETED)]))
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(0, "m1", Status.COMPLETED)]))
    assert len(producer.to(NAMES.status)) == 1
    sample = fold._metrics.registry.get_sample_value
    assert sample("agentreach_messages_terminal_total", {"capability": "demo.echo", "status": "COMPLETED"}) == 1


def _outcome(offset: int, mid: str, status: Status, at: int, **fields: Any) -> FakeMessage:
    value = codec.encode(Receipt(message_id=mid, trace_id="t1", tenant="d", capability="demo.echo", status=status,
                                 at=at, deadline=10**13, delivery_timeout_ms=60_000, instance_id="i1",
                                 agent_id="agent://demo/echo", **fields))
    return FakeMessage(NAMES.receipts, 0, offset, value, mid.encode(), [(H.REPLY_TO, REPLIES.encode())])


def test_an_ending_that_carries_its_start_reads_as_routed_started_completed(tmp_path: Path) -> None:
    """A run that ended within the agent's grace skipped STARTED: its COMPLETED carries `started_at`. The row shows
    the STARTED step at that time, its run time is measured from it, and the timekeeper has nothing left to do."""
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer()
    routed = _outcome(0, "m1", Status.ROUTED, 1_000, decision=Decision(topic="ns.inbox.demo", partition=0, offset=7))
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [routed]))
    before = fold.row("m1")
    assert before is not None and before.status is Status.ROUTED and before.delivery_due_at == 61_000
    done = _outcome(1, "m1", Status.COMPLETED, 1_350, result=b'{"ok":1}', timings={STARTED_AT: 1_020, "run_ms": 330})
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [done]))

    row = fold.row("m1")
    assert row is not None and row.status is Status.COMPLETED and row.terminal_at == 1_350 and row.result == '{"ok":1}'
    assert [(s.status, s.at, s.instance_id) for s in row.timeline] == [
        (Status.ROUTED, 1_000, "i1"), (Status.STARTED, 1_020, "i1"), (Status.COMPLETED, 1_350, "i1")]
    assert row.delivery_due_at is None and fold.due_rows(10**14) == [], "nothing for the timekeeper to reroute"
    assert [r for r in producer.to(REPLIES)] == [done.value()], "the reply is the COMPLETED receipt, once"
    sample = fold._metrics.registry.get_sample_value
    assert sample("agentreach_execution_latency_seconds_sum", {"capability": "demo.echo"}) == pytest.approx(0.33)
    assert sample("agentreach_deliveries_total", {"capability": "demo.echo", "outcome": "in_time"}) == 1

    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [_outcome(2, "m1", Status.COMPLETED, 1_350,
        result=b'{"ok":1}', timings={STARTED_AT: 1_020, "run_ms": 330})]))
    assert fold.row("m1") == row, "the same ending read again changes nothing"
