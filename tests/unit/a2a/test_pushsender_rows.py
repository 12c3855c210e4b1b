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
from reach.a2a.pushsender import PushCollector, PushSender
from reach.names import Names
from reach.settings import KafkaSettings
from tests.unit.a2a.test_pushsender import ROW, Producer

CONFIG = push.PushConfig(id="c1", url="https://r.example/a2a", token="tk", created_at=int(time.time() * 1000))
TASK = push.TaskPush(task_id="m1", tenant="acme", configs=(CONFIG,))
RUNNING = {**ROW, "status": "STARTED", "result": None, "timeline": ROW["timeline"][:3]}


class Msg:
    """A changelog record as the consumer hands it over."""

    def __init__(self, value: bytes | None, offset: int = 0) -> None:
        self._value, self._offset = value, offset

    def value(self) -> bytes | None:
        return self._value

    def topic(self) -> str:
        return "reach.status"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def sender(book: MemoryPushBook) -> PushSender:
    made = PushSender(names=Names("reach"), kafka=KafkaSettings(), book=book)
    made._stop.wait = lambda _s=None: False  # type: ignore[method-assign]  # no pause between attempts
    return made


def test_a_row_without_a_usable_timeline_is_skipped_and_the_rows_behind_it_are_sent() -> None:
    book = MemoryPushBook()
    asyncio.run(book.put(TASK))
    out, producer = sender(book), Producer([])
    bad = {**ROW, "timeline": "not a list of steps"}
    out._send(producer, [bad, ROW])  # type: ignore[arg-type]  # the old sender raised here, for ever
    assert out.skipped == 1 and len(producer.acked) == 4


def test_changelog_records_that_do_not_read_are_skipped_and_counted() -> None:
    book = MemoryPushBook()
    out = sender(book)
    rows = out._pending([Msg(b"{not json", 1), Msg(b"[1, 2]", 2), Msg(b'{"no": "id"}', 3), Msg(None, 4),  # type: ignore[list-item]
                         Msg(json.dumps(ROW).encode(), 5)])
    assert [r["message_id"] for r in rows] == ["m1"] and out.skipped == 3  # a tombstone is not a bad row
    registry = CollectorRegistry()
    registry.register(PushCollector(book))
    assert b"agentreach_gateway_push_rows_skipped_total 3.0" in generate_latest(registry)


def test_a_config_applied_after_its_tasks_change_was_read_still_gets_that_change() -> None:
    book = MemoryPushBook()
    out, producer = sender(book), Producer([])
    out._send(producer, out._pending([Msg(json.dumps(ROW).encode())]))  # type: ignore[list-item]
    assert producer.acked == []  # read before any config: nothing owed yet
    asyncio.run(book.put(TASK))  # the config is kept; the gateway's read of the row lags the changelog
    book.offer(RUNNING)
    out._send(producer, out._pending([]))
    bodies = [json.loads(pushsender.codec.decode(v, pushsender.push.Envelope).payload)["body"]
              for _, _, v in producer.acked]
    states = [b["statusUpdate"]["status"]["state"] for b in bodies if "statusUpdate" in b]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]  # the ending too
    assert len(producer.acked) == 4  # and each once: the offered row's notifications are the same ids
    out._send(producer, out._pending([]))
    assert len(producer.acked) == 4


def test_a_tasks_configs_are_expired_a_while_after_it_ended_and_old_ones_are_swept() -> None:
    book = MemoryPushBook()
    asyncio.run(book.put(TASK))
    asyncio.run(book.put(push.TaskPush(task_id="m2", tenant="acme", configs=(push.PushConfig(id="c", url=CONFIG.url,
                                                                                           created_at=1),))))
    out, producer = sender(book), Producer([])
    out._send(producer, [RUNNING])  # type: ignore[list-item]
    out._expire(time.monotonic() + pushsender.LINGER_S + 1)
    assert book.expired == [] and book.get("m1") is not None  # running: kept
    assert book.get("m2") is None  # set a week ago and more: gone from the topic, forgotten here
    out._send(producer, [ROW])  # type: ignore[arg-type]  # it ended
    out._expire(time.monotonic())
    assert book.get("m1") is not None  # not yet: its receivers may still read their configs
    out._expire(time.monotonic() + pushsender.LINGER_S + 1)
    assert book.expired == ["m1"] and book.get("m1") is None and out.counts()["expired"] == 1
    assert out._sent == {}  # its cursors go with it


def test_the_ended_tasks_waiting_to_expire_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(pushsender, "MAX_ENDED", 2)
    book = MemoryPushBook()
    out, producer = sender(book), Producer([])
    for n in range(4):
        asyncio.run(book.put(push.TaskPush(task_id=f"t{n}", tenant="acme", configs=(CONFIG,))))
        out._send(producer, [{**ROW, "message_id": f"t{n}"}])  # type: ignore[list-item]
    out._expire(time.monotonic())
    assert book.expired == ["t0", "t1"]
