"""The audit writer's driver: a restarted writer appends only what follows its committed offset; a bad record is
skipped, never fatal; a partition it no longer owns is left to its new owner."""

from __future__ import annotations

from typing import Any, cast

import pytest

from reach.kafka import clients, codec, headers
from reach.kafka.worker import Record
from reach.names import Names
from reach.records import (
    AgentRegistration,
    AgentState,
    AuditKind,
    Control,
    ControlKind,
    InstanceAction,
    InstanceOverride,
)
from reach.settings import KafkaSettings
from reach.streams.audit.writer import AuditDriver, AuditWriter
from tests.unit.streams.kafka_fakes import FakeMessage

NAMES = Names("t")
REG = (NAMES.registry, 0)
CTL = (NAMES.control, 0)


def reg(version: str, beat: int = 1_000) -> bytes:
    return codec.encode(AgentRegistration(agent_id="agent://a/b", instance_id="i-1", build_version=version,
                                          state=AgentState.READY, heartbeat_at=beat, ttl_ms=10_000,
                                          inbox_topic="t.agent.a.b"))


def drain() -> bytes:
    return codec.encode(Control(kind=ControlKind.INSTANCE, scope="i-1", updated_at=5, updated_by="reach-cli:ana",
                                instance=InstanceOverride(instance_id="i-1", action=InstanceAction.DRAIN)))


def msgs(*records: tuple[tuple[str, int], int, bytes | None, str]) -> list[Record[bytes]]:
    return [Record(cast(Any, FakeMessage(tp[0], tp[1], offset, value, key.encode())))
            for tp, offset, value, key in records]


def events(batch: list[tuple[Any, Any]]) -> list[Any]:
    return [event for _, event in batch]


def test_records_before_the_committed_offset_are_folded_not_appended_again() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({REG: 2, CTL: -1001}, [])  # registry committed at 2; control never committed
    made = driver.batch(msgs((REG, 0, reg("1.0"), "i-1"), (REG, 1, reg("1.0", 2_000), "i-1"),
                             (REG, 2, reg("1.1", 3_000), "i-1"), (CTL, 0, drain(), "INSTANCE:i-1")))
    appended = events(made)
    assert [(e.kind, e.before, e.after) for e in appended] == [(AuditKind.VERSION, '"1.0"', '"1.1"'),
                                                               (AuditKind.INSTANCE, None, appended[1].after)]
    assert (appended[1].actor, appended[1].agent_id) == ("reach-cli:ana", "agent://a/b")
    assert [cause for cause, _ in made] == [(*REG, 2), (*CTL, 0)], "each event is caused by its own record"


def test_a_record_that_is_no_change_appends_nothing() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({REG: 0}, [])
    driver.batch(msgs((REG, 0, reg("1.0"), "i-1")))
    assert driver.batch(msgs((REG, 1, reg("1.0", 9_000), "i-1"))) == []  # a heartbeat


def test_a_bad_record_is_skipped() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({REG: 0}, [])
    made = driver.batch(msgs((REG, 0, b"\x00garbage", "i-1"), (REG, 1, reg("1.0"), "i-1")))
    assert [(cause, e.kind) for cause, e in made] == [((*REG, 1), AuditKind.JOIN)]


def test_a_revoked_partition_is_left_alone_and_a_new_assignment_reads_from_nothing() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({REG: 0}, [])
    driver.batch(msgs((REG, 0, reg("1.0"), "i-1")))
    driver.revoked([REG])
    assert driver.batch(msgs((REG, 1, reg("2.0"), "i-1"))) == []
    driver.assigned({REG: 1}, [])  # read again from the beginning: offset 0 folds, 1 is new
    made = driver.batch(msgs((REG, 0, reg("1.0"), "i-1"), (REG, 1, reg("2.0"), "i-1")))
    assert [e.kind for e in events(made)] == [AuditKind.VERSION]


def test_a_control_tombstone_takes_its_actor_from_the_header() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({CTL: 0}, [])
    driver.batch(msgs((CTL, 0, drain(), "INSTANCE:i-1")))
    removal = Record(cast(Any, FakeMessage(NAMES.control, 0, 1, None, b"INSTANCE:i-1", [(headers.BY, b"console:bo")])))
    [(_, event)] = driver.batch([removal])
    assert (event.actor, event.after) == ("console:bo", None)


def test_after_compaction_the_audit_topic_says_what_a_key_last_looked_like() -> None:
    """The registry kept only a later heartbeat (1.1) of the key; the records the events came from are gone. The
    writer that appended JOIN and VERSION stopped; its successor seeds from them and appends nothing again."""
    first = AuditDriver(NAMES)
    first.assigned({REG: 0}, [])
    appended = events(first.batch(msgs((REG, 0, reg("1.0"), "i-1"), (REG, 1, reg("1.1", 2_000), "i-1"))))
    successor = AuditDriver(NAMES)
    successor.assigned({REG: 2}, appended)  # offsets 0 and 1 compacted away; 2 is the first record left
    assert successor.batch(msgs((REG, 2, reg("1.1", 9_000), "i-1"))) == []
    [(_, event)] = successor.batch(msgs((REG, 3, reg("1.2", 9_500), "i-1")))
    assert (event.kind, event.before, event.after) == (AuditKind.VERSION, '"1.1"', '"1.2"')


def test_a_silent_instance_is_evicted_only_once_its_partition_is_read_to_the_end() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({REG: 1}, [])
    driver.batch(msgs((REG, 0, reg("1.0", 1_000), "i-1")))  # an old heartbeat, replayed: a later one may follow
    assert driver.evictions([], now_ms=60_000) == []
    assert driver.evictions([(NAMES.registry, 1)], now_ms=60_000) == []  # not a partition this writer owns
    [evicted] = driver.evictions([REG], now_ms=60_000)
    assert (evicted.kind, evicted.subject, evicted.actor) == (AuditKind.EVICTED, "i-1", "reach")
    driver.revoked([REG])
    driver.assigned({REG: 1}, [evicted])
    driver.batch(msgs((REG, 0, reg("1.0", 1_000), "i-1")))
    assert driver.evictions([REG], now_ms=90_000) == []  # the successor reads the eviction back


def test_a_revoked_partitions_instances_are_left_to_its_new_owner() -> None:
    driver = AuditDriver(NAMES)
    driver.assigned({REG: 0, CTL: 0}, [])
    driver.batch(msgs((REG, 0, reg("1.0", 1_000), "i-1")))
    driver.revoked([REG])
    assert driver.evictions([REG], now_ms=60_000) == []


def test_the_writer_tails_its_quiet_topics_with_the_idle_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    class Stop(Exception):
        pass

    def consumer(_group: str, _kafka: KafkaSettings, *, profile: str = "hot", **_: Any) -> Any:
        asked.append(profile)
        raise Stop

    monkeypatch.setattr(clients, "consumer", consumer)
    monkeypatch.setattr(clients, "producer", lambda *_a, **_k: None)
    with pytest.raises(Stop):
        AuditWriter(names=NAMES, kafka=KafkaSettings())._loop()
    assert asked == ["idle"]
