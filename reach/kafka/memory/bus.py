"""The in-memory cluster: topics of partitioned logs, consumer groups and their commits (reach.kafka.memory)."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from reach.kafka.groups import Assignment, GroupDescription, GroupOffsets, Member

if TYPE_CHECKING:
    from reach.kafka.memory.consumer import MemoryConsumer

TP = tuple[str, int]
Headers = list[tuple[str, str | bytes | None]]


def unknown_topic(topic: str) -> KafkaException:
    """What the broker answers for a topic it does not have."""
    return KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"unknown topic {topic}"))


def as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def as_headers(raw: Any) -> Headers | None:
    """Headers as a consumer returns them: (name, bytes) pairs, None when there are none."""
    if not raw:
        return None
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(str(k), as_bytes(v)) for k, v in pairs]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a partition's log."""

    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp: int


@dataclass
class _Topic:
    name: str
    partitions: list[list[Record]]
    configs: dict[str, str] = field(default_factory=dict)


# -- metadata, shaped like confluent-kafka's ---------------------------------------------------------------

@dataclass(frozen=True)
class PartitionMetadata:
    """One partition in a metadata answer (always led by broker 1)."""

    id: int
    leader: int = 1
    replicas: tuple[int, ...] = (1,)
    isrs: tuple[int, ...] = (1,)
    error: KafkaError | None = None


@dataclass(frozen=True)
class TopicMetadata:
    """One topic in a metadata answer; `error` UNKNOWN_TOPIC_OR_PART when it does not exist."""

    topic: str
    partitions: dict[int, PartitionMetadata]
    error: KafkaError | None = None


@dataclass(frozen=True)
class BrokerMetadata:
    """The bus's one broker."""

    id: int
    host: str
    port: int = 0


@dataclass(frozen=True)
class ClusterMetadata:
    """What list_topics() answers: `.topics` and `.brokers`, as confluent-kafka's."""

    topics: dict[str, TopicMetadata]
    brokers: dict[int, BrokerMetadata]
    cluster_id: str = "memory"
    controller_id: int = 1


# -- the bus -----------------------------------------------------------------------------------------------

class _Group:
    """Members (in join order) and committed offsets of one consumer group."""

    def __init__(self) -> None:
        self.members: dict[int, MemoryConsumer] = {}
        self.committed: dict[TP, int] = {}
        self.generation = 0


class Bus:
    """Topics and groups of one in-memory cluster; every method is thread-safe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cond = threading.Condition(threading.RLock())
        self.topics: dict[str, _Topic] = {}
        self.groups: dict[str, _Group] = {}
        self.topology = 0  # bumped when topics or partitions appear: regex subscriptions and groups rebalance
        self._ids = itertools.count(1)

    # topics

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> bool:
        """False when it exists already."""
        with self.cond:
            if name in self.topics:
                return False
            self.topics[name] = _Topic(name, [[] for _ in range(max(partitions, 1))], dict(configs or {}))
            self.topology += 1
            self.cond.notify_all()
            return True

    def add_partitions(self, name: str, total: int) -> None:
        with self.cond:
            topic = self._topic(name)
            topic.partitions.extend([] for _ in range(total - len(topic.partitions)))
            self.topology += 1
            self.cond.notify_all()

    def delete_topic(self, name: str) -> None:
        with self.cond:
            self._topic(name)
            del self.topics[name]
            self.topology += 1
            self.cond.notify_all()

    def _topic(self, name: str) -> _Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise unknown_topic(name)
        return topic

    def metadata(self, topic: str | None = None) -> ClusterMetadata:
        with self.cond:
            names = [topic] if topic is not None else list(self.topics)
            found: dict[str, TopicMetadata] = {}
            for name in names:
                t = self.topics.get(name)
                found[name] = (TopicMetadata(name, {p: PartitionMetadata(p) for p in range(len(t.partitions))})
                               if t is not None else
                               TopicMetadata(name, {}, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            return ClusterMetadata(found, {1: BrokerMetadata(1, self.name)})

    def append(self, topic: str, partition: int, record: Record) -> int:
        with self.cond:
            log = self._topic(topic).partitions[partition]
            log.append(record)
            self.cond.notify_all()
            return len(log) - 1

    def read(self, tp: TP, offset: int) -> Message | None:
        with self.cond:
            topic = self.topics.get(tp[0])
            if topic is None or tp[1] >= len(topic.partitions) or offset >= len(topic.partitions[tp[1]]):
                return None
            rec = topic.partitions[tp[1]][offset]
        return Message(topic=tp[0], partition=tp[1], offset=offset, key=rec.key, value=rec.value,
                       headers=list(rec.headers) if rec.headers else None,
                       timestamp=(TIMESTAMP_CREATE_TIME, rec.timestamp))

    def watermarks(self, tp: TP) -> tuple[int, int]:
        with self.cond:
            topic = self._topic(tp[0])
            if tp[1] >= len(topic.partitions):
                raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
            return 0, len(topic.partitions[tp[1]])

    def partitions(self, topic: str) -> int:
        with self.cond:
            found = self.topics.get(topic)
            return len(found.partitions) if found is not None else 0

    def offset_for_time(self, tp: TP, at_ms: int) -> int:
        with self.cond:
            log = self._topic(tp[0]).partitions[tp[1]]
            return next((i for i, rec in enumerate(log) if rec.timestamp >= at_ms), OFFSET_END)

    # groups

    def join(self, group: str, member: MemoryConsumer) -> int:
        with self.cond:
            member_id = next(self._ids)
            g = self.groups.setdefault(group, _Group())
            g.members[member_id] = member
            g.generation += 1
            return member_id

    def leave(self, group: str, member_id: int) -> None:
        with self.cond:
            g = self.groups.get(group)
            if g is not None and g.members.pop(member_id, None) is not None:
                g.generation += 1

    def epoch(self, group: str) -> tuple[int, int]:
        with self.cond:
            return self.groups[group].generation, self.topology

    def target(self, group: str, member_id: int) -> set[TP]:
        """The partitions the group's round-robin assignment gives this member now."""
        with self.cond:
            members = sorted(self.groups[group].members.items())
            wanted = {mid: set(m.matching()) for mid, m in members}
            every = sorted({(t, p) for topics in wanted.values() for t in topics for p in range(self.partitions(t))})
            mine: set[TP] = set()
            turn = 0
            for tp in every:
                takers = [mid for mid, topics in wanted.items() if tp[0] in topics]
                chosen = takers[turn % len(takers)]
                turn += 1
                if chosen == member_id:
                    mine.add(tp)
            return mine

    def owned_by_others(self, group: str, member_id: int) -> set[TP]:
        """The partitions the group's other members still hold (asked outside the bus's lock: each takes its own)."""
        with self.cond:
            others = [m for mid, m in self.groups[group].members.items() if mid != member_id]
        return {tp for m in others for tp in m.owned()}

    def commit(self, group: str, offsets: dict[TP, int]) -> None:
        with self.cond:
            self.groups.setdefault(group, _Group()).committed.update(offsets)

    def committed(self, group: str, tp: TP) -> int:
        with self.cond:
            g = self.groups.get(group)
            return g.committed.get(tp, OFFSET_INVALID) if g is not None else OFFSET_INVALID

    def describe(self, group: str) -> GroupDescription:
        with self.cond:
            g = self.groups.get(group)
            if g is None or not g.members:
                return GroupDescription(group, "EMPTY", [])
            return GroupDescription(group, "STABLE", [
                Member(m.client_id, Assignment([TopicPartition(t, p) for t, p in sorted(m.owned())]))
                for mid, m in sorted(g.members.items())])

    def group_offsets(self, group: str) -> GroupOffsets:
        with self.cond:
            g = self.groups.get(group)
            offsets = sorted((g.committed if g is not None else {}).items())
            return GroupOffsets(group, [TopicPartition(t, p, o) for (t, p), o in offsets])

    def wait(self, timeout: float) -> None:
        with self.cond:
            self.cond.wait(timeout)
