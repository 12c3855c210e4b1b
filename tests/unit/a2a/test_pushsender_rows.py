"""The push sender over an in-memory book and producer: a row that does not read is skipped (logged, counted) and
never stops the rows behind it; a config applied after its task's change was read still gets that change (the
race of decisions/0042, closed by decisions/0047); a task's configs are expired a while after it ends."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from reach.a2a import push, pushsender
from reach.a2a.pushbook import MemoryPushBook
from reach.a2a.pushsender import PushCollector
from reach.kafka import codec
from reach.kafka.worker import Delivered
from reach.records import Envelope
from tests.unit.a2a.test_pushsender import ROW, batch, records, sender

CONFIG = push.PushConfig(id="c1", url="https://r.example/a2a", token="tk", created_at=int(time.time() * 1000))
TASK = push.TaskPush(task_id="m1", tenant="acme", configs=(CONFIG,))
RUNNING = {**ROW, "status": "STARTED", "result": None, "timeline": ROW["timeline"][:3]}


def test_a_row_without_a_usable_timeline_is_skipped_and_the_rows_behind_it_are_sent() -> None:
    book = MemoryPushBook()
    asyncio.run(book.put(TASK))
    out = sender(book)
    bad = {**ROW, "timeline": "not a list of steps"}
    sent = batch(out, records(bad, ROW))  # the old sender raised here, for ever
    assert out.skipped == 1 and len(sent) == 4 and {o.cause for o in sent} == {("reach.status", 0, 1)}


def test_changelog_records_that_do_not_read_are_skipped_and_counted() -> None:
    book = MemoryPushBook()
    out = sender(book)
    assert batch(out, records(b"{not json", b"[1, 2]", b'{"no": "id"}', None, ROW)) == []  # no configs: nothing owed
    assert out.skipped == 3  # a tombstone is not a bad row
    registry = CollectorRegistry()
    registry.register(PushCollector(book))
    assert b"agentreach_gateway_push_rows_skipped_total 3.0" in generate_latest(registry)


def test_a_config_applied_after_its_tasks_change_was_read_still_gets_that_change() -> None:
    book = MemoryPushBook()
    out = sender(book)
    assert batch(out, records(ROW)) == []  # read before any config: nothing owed yet
    asyncio.run(book.put(TASK))  # the config is kept; the gateway's read of the row lags the changelog
    book.offer(RUNNING)
    sent = batch(out, [])  # no changelog record: the worker's owed outputs
    bodies = [json.loads(codec.decode(o.value, Envelope).payload)["body"] for o in sent]
    states = [b["statusUpdate"]["status"]["state"] for b in bodies if "statusUpdate" in b]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]  # the ending too
    assert len(sent) == 4 and {o.cause for o in sent} == {None}  # each once: the offered row's are the same ids
    assert batch(out, []) == []


def test_an_offered_row_not_acknowledged_is_offered_again_and_one_refused_for_good_is_settled(
        monkeypatch: Any) -> None:
    monkeypatch.setattr(pushsender, "RETRY_S", 0.0)
    book = MemoryPushBook()
    asyncio.run(book.put(TASK))
    out = sender(book)
    book.offer(RUNNING)
    first = batch(out, [], ack=False)  # an outage
    again = list(out.owed())
    assert len(again) == len(first) == 2, "offered again"
    out.owed_refused(again[0], ["too large"])
    out.acknowledged([Delivered(o, 0, 0) for o in again[1:]])
    assert out.refused == 1 and out.produced == 1
    assert batch(out, []) == [], "settled: nothing offered again"


def test_a_tasks_configs_are_expired_a_while_after_it_ended_and_old_ones_are_swept() -> None:
    book = MemoryPushBook()
    asyncio.run(book.put(TASK))
    asyncio.run(book.put(push.TaskPush(task_id="m2", tenant="acme", configs=(push.PushConfig(id="c", url=CONFIG.url,
                                                                                           created_at=1),))))
    out = sender(book)
    batch(out, records(RUNNING))
    out._expire(time.monotonic() + pushsender.LINGER_S + 1)
    assert book.expired == [] and book.get("m1") is not None  # running: kept
    assert book.get("m2") is None  # set a week ago and more: gone from the topic, forgotten here
    batch(out, records(ROW, first=1))  # it ended
    out._expire(time.monotonic())
    assert book.get("m1") is not None  # not yet: its receivers may still read their configs
    out._expire(time.monotonic() + pushsender.LINGER_S + 1)
    assert book.expired == ["m1"] and book.get("m1") is None and out.counts()["expired"] == 1
    assert out._sent == {}  # its cursors go with it


def test_the_ended_tasks_waiting_to_expire_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(pushsender, "MAX_ENDED", 2)
    book = MemoryPushBook()
    out = sender(book)
    for n in range(4):
        asyncio.run(book.put(push.TaskPush(task_id=f"t{n}", tenant="acme", configs=(CONFIG,))))
        batch(out, records({**ROW, "message_id": f"t{n}"}, first=n))
    out._expire(time.monotonic())
    assert book.expired == ["t0", "t1"]
