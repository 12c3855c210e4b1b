"""The registry of agent instances: a pure view over heartbeats, and a reader of the compacted topic."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from reach import clients, codec
from reach.errors import InfraUnavailable
from reach.names import Names
from reach.records import AgentRegistration, AgentState
from reach.settings import KafkaSettings


@dataclass(frozen=True)
class InstanceInfo:
    """One instance as seen now: its last registration, effective state, heartbeat age and load."""

    registration: AgentRegistration
    effective_state: AgentState
    heartbeat_age_ms: int
    load: float


class RegistryView:
    """Latest registration per instance (no I/O); silent for more than 2 x ttl means OFFLINE."""

    def __init__(self) -> None:
        self._by_instance: dict[str, AgentRegistration] = {}

    def apply(self, instance_id: str, registration: AgentRegistration | None) -> None:
        """Take one registry record; None (a tombstone) removes the instance."""
        if registration is None:
            self._by_instance.pop(instance_id, None)
        else:
            self._by_instance[instance_id] = registration

    def instances(self, now_ms: int) -> list[InstanceInfo]:
        """Every known instance, sorted by agent id then instance id."""
        out = []
        for reg in sorted(self._by_instance.values(), key=lambda r: (r.agent_id, r.instance_id)):
            age = max(0, now_ms - reg.heartbeat_at)
            state = AgentState.OFFLINE if age > 2 * reg.ttl_ms else reg.state
            out.append(InstanceInfo(reg, state, age, reg.inflight / max(1, reg.max_concurrency)))
        return out

    def live(self, now_ms: int) -> list[AgentRegistration]:
        """Registrations that may take work: READY and heard from within 2 x ttl."""
        return [i.registration for i in self.instances(now_ms) if i.effective_state is AgentState.READY]

    def __len__(self) -> int:
        return len(self._by_instance)


def read_registry(kafka: KafkaSettings | None, names: Names, timeout: float = 10) -> RegistryView:
    """Read the registry topic from the beginning to its current end (assign, no consumer group)."""
    view = RegistryView()
    consumer = clients.consumer(f"{names.namespace}.registry-reader.{uuid.uuid4().hex[:8]}", kafka)
    try:
        meta = consumer.list_topics(names.registry, timeout=timeout).topics.get(names.registry)
        if meta is None or meta.error is not None:
            raise InfraUnavailable(f"Registry topic {names.registry} is missing; run `reach topics apply`.")
        deadline = time.monotonic() + timeout
        ends: dict[int, int] = {}
        for p in meta.partitions:
            low, high = _watermarks(consumer, TopicPartition(names.registry, p), deadline)
            if high > low:
                ends[p] = high
        if not ends:
            return view
        consumer.assign([TopicPartition(names.registry, p, OFFSET_BEGINNING) for p in ends])
        while ends and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                for tp in consumer.position([TopicPartition(names.registry, p) for p in ends]):
                    if tp.offset >= ends[tp.partition]:  # the tail may be compacted away
                        ends.pop(tp.partition, None)
                continue
            if msg.error():
                continue
            _apply(view, msg.key(), msg.value())
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset + 1 >= ends.get(partition, 0):
                ends.pop(partition, None)
        if ends:
            raise InfraUnavailable(f"Timed out after {timeout:.0f}s reading {names.registry}; is the broker busy?")
        return view
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic()))
            return low, high
        except KafkaException as exc:  # a fresh topic may not have a known leader yet
            if time.monotonic() >= deadline:
                raise InfraUnavailable(f"Cannot read the end of {tp.topic}: {exc.args[0].str()}") from None
            time.sleep(0.1)


def _apply(view: RegistryView, key: bytes | None, value: bytes | None) -> None:
    if key is None:
        return
    if value is None:
        view.apply(key.decode(errors="replace"), None)
        return
    try:
        view.apply(key.decode(errors="replace"), codec.decode(value, AgentRegistration))
    except codec.DecodeError:
        pass  # a foreign record on the registry is ignored, not fatal to readers
