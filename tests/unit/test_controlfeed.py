"""The control feed's poll on a fake consumer: records fold into the view as they arrive; a record that needs
the unreachable Schema Registry is sought back to (with the rest of its batch), never skipped."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from reach.control import instance_record
from reach.controlfeed import ControlFeed
from reach.kafka import codec
from reach.names import Names
from reach.records import InstanceAction
from reach.settings import KafkaSettings
from tests.unit.streams.kafka_fakes import FakeMessage

NAMES = Names("ns")


class FakeConsumer:
    def __init__(self, batch: list[FakeMessage]) -> None:
        self.batch = batch
        self.seeks: list[tuple[int, int]] = []

    def poll(self, _timeout: float) -> Any:
        return self.batch.pop(0) if self.batch else None

    def consume(self, n: int, _timeout: float) -> list[FakeMessage]:
        out, self.batch = self.batch[:n], self.batch[n:]
        return out

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))


def record(offset: int, instance: str, action: InstanceAction, partition: int = 0) -> FakeMessage:
    control = instance_record(instance, action)
    return FakeMessage(NAMES.control, partition, offset, codec.encode(control), control.key.encode())


def test_records_fold_into_the_view_as_they_arrive() -> None:
    feed = ControlFeed(names=NAMES, kafka=KafkaSettings())
    feed._poll(FakeConsumer([record(0, "i-1", InstanceAction.DISABLE), record(1, "i-2", InstanceAction.DRAIN)]))
    assert feed.view.instance_action("i-1") is InstanceAction.DISABLE
    assert feed.view.instance_action("i-2") is InstanceAction.DRAIN
    feed._poll(FakeConsumer([record(2, "i-1", InstanceAction.ENABLE)]))
    assert feed.view.instance_action("i-1") is None


def test_a_registry_outage_seeks_back_to_every_unread_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import reach.control

    down = {b"INSTANCE:i-2"}
    real = reach.control.decode

    def decode(value: bytes, model: Any) -> Any:
        control = real(value, model)
        if control.key.encode() in down:
            raise codec.RegistryUnavailable("the registry does not answer")
        return control

    monkeypatch.setattr(reach.control, "decode", decode)
    feed = ControlFeed(names=NAMES, kafka=KafkaSettings())
    consumer = FakeConsumer([record(0, "i-1", InstanceAction.DISABLE), record(1, "i-2", InstanceAction.DRAIN),
                             record(5, "i-3", InstanceAction.DRAIN, partition=1)])
    with pytest.raises(codec.RegistryUnavailable):
        feed._poll(consumer)
    assert feed.view.instance_action("i-1") is InstanceAction.DISABLE
    assert consumer.seeks == [(0, 1), (1, 5)], "the failed record and the rest of its batch are read again"
