"""The apps directory's follower over a fake consumer: ready when caught up, live changes, bad records, a
Schema Registry outage retried instead of skipped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach import apps
from reach.apps import new_app
from reach.errors import InfraUnavailable, ReachError
from reach.gateway.directory import KafkaAppDirectory
from reach.kafka import codec
from reach.names import Names
from reach.records import App
from reach.secretbox import SecretBox
from reach.settings import KafkaSettings

BOX = SecretBox([SecretStr(Fernet.generate_key().decode())])
NAMES = Names("t")


@dataclass
class Msg:
    _key: bytes | None
    _value: bytes | None
    _offset: int
    _error: Any = None

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return 0

    def error(self) -> Any:
        return self._error


@dataclass
class FakeConsumer:
    """One partition of the apps topic; `log` may grow while the directory follows it."""

    log: list[Msg] = field(default_factory=list)
    exists: bool = True
    pos: int = -1001
    closed: bool = False

    def add(self, key: bytes | None, value: bytes | None, error: Any = None) -> None:
        self.log.append(Msg(key, value, len(self.log), error))

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = SimpleNamespace(error=None, partitions={0: None})
        return SimpleNamespace(topics={topic: meta} if self.exists else {})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.log)

    def assign(self, parts: list[TopicPartition]) -> None:
        self.pos = -1001

    def poll(self, timeout: float) -> Msg | None:
        start = max(self.pos, 0)
        if start < len(self.log):
            self.pos = start + 1
            return self.log[start]
        time.sleep(min(timeout, 0.01))
        return None

    def consume(self, n: int, timeout: float) -> list[Msg]:
        start = max(self.pos, 0)
        batch = self.log[start:start + n]
        self.pos = start + len(batch) if batch else self.pos
        return batch

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, self.pos) for p in parts]

    def close(self) -> None:
        self.closed = True


def _app() -> App:
    return new_app(BOX, name="a", tenant="t", capabilities=[], rate=1, burst=1, now_ms=0, by="test")[0]


def _directory(consumer: FakeConsumer) -> KafkaAppDirectory:
    return KafkaAppDirectory(names=NAMES, box=BOX, kafka=KafkaSettings(), open_consumer=lambda: consumer)  # type: ignore[arg-type,return-value]


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_ready_after_the_existing_records_then_follows_changes_and_skips_bad_ones() -> None:
    consumer = FakeConsumer()
    first = _app()
    consumer.add(first.app_id.encode(), codec.encode(first))
    consumer.add(b"app_bad", b"garbage")
    consumer.add(None, None, error="_TRANSPORT")  # an error event is logged and passed over
    directory = _directory(consumer)
    directory.start(timeout=5)
    try:
        assert directory.ready and directory.lookup(first.keys[0].key_id) is not None and directory.refused == 1
        gone = apps.revoked(first, key_id=None, now_ms=1, by="test")
        consumer.add(first.app_id.encode(), codec.encode(gone))
        _until(lambda: directory.lookup(first.keys[0].key_id) is None)
        assert directory.alive
    finally:
        directory.stop()
    assert not directory.alive and consumer.closed


def test_an_empty_topic_is_ready_at_once() -> None:
    directory = _directory(FakeConsumer())
    directory.start(timeout=5)
    directory.stop()


def test_a_missing_topic_names_the_fix_and_closes_the_consumer() -> None:
    consumer = FakeConsumer(exists=False)
    with pytest.raises(ReachError, match="reach topics apply"):
        _directory(consumer).start(timeout=1)
    assert consumer.closed


def test_not_caught_up_in_time_is_infra_unavailable() -> None:
    consumer = FakeConsumer()
    consumer.add(b"app_x", b"never read")
    consumer.poll = lambda timeout: (time.sleep(0.01), None)[1]  # type: ignore[method-assign]
    with pytest.raises(InfraUnavailable, match="could not read t.apps"):
        _directory(consumer).start(timeout=0.3)
    assert consumer.closed


def test_a_schema_registry_outage_retries_the_record_instead_of_skipping_it(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    good = _app()
    consumer = FakeConsumer()
    consumer.add(good.app_id.encode(), codec.encode(good))
    real, calls = codec.decode, []
    healed = threading.Event()

    def flaky(data: bytes, model: Any) -> Any:
        calls.append(1)
        if not healed.is_set():
            raise codec.RegistryUnavailable("registry down")
        return real(data, model)

    monkeypatch.setattr(codec, "decode", flaky)
    monkeypatch.setattr("reach.gateway.directory.REGISTRY_RETRY_S", 0.05)
    directory = _directory(consumer)
    threading.Timer(0.3, healed.set).start()
    directory.start(timeout=5)
    try:
        assert directory.lookup(good.keys[0].key_id) is not None and directory.refused == 0 and len(calls) >= 2
    finally:
        directory.stop()
