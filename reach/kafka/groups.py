"""Consumer-group descriptions and committed offsets, shaped like confluent-kafka's admin results (only what
Reach reads: `.members[].client_id`, `.members[].assignment.topic_partitions`, `.topic_partitions[].offset`).

The group admin child's answers (reach.streams.groupadmin) and the in-memory bus (reach.kafka.memory) both
return them, so a caller takes either, or an AdminClient."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import TopicPartition


@dataclass(frozen=True)
class Assignment:
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class Member:
    """One member of a described group: its client id and the partitions it holds."""

    client_id: str
    assignment: Assignment


@dataclass(frozen=True)
class GroupDescription:
    """A described group (only what the callers read)."""

    group_id: str
    state: str
    members: list[Member] = field(default_factory=list)


@dataclass(frozen=True)
class GroupOffsets:
    """A group's committed offsets."""

    group_id: str
    topic_partitions: list[TopicPartition] = field(default_factory=list)
