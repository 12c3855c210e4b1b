"""Group membership with no intent to read: a consumer group on a topic whose partitions are assigned but never read.

`Membership` subscribes to the topic; each partition assigned is handed to the caller's `on_assigned`, then assigned at
its end and paused (another reader folds the topic, or the member writes it: its own records are never fetched). The
group coordinator's assignment thus says which member owns which partition: the health writer writes the health
partitions it owns (reach.streams.health), and `Election` makes the member holding partition 0 the leader (the canary
controller): a member that dies loses its partitions within the session timeout, and a rebalance moves them. `poll`
serves the membership (call it often: it also heartbeats)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from reach.kafka import clients, topicreader
from reach.settings import ConsumerProfile, KafkaSettings

Partitions = Callable[[list[int]], None]


class Membership:
    """Membership of `group` on `topic`; the callbacks get the partitions (of `topic`) assigned, revoked or lost."""

    def __init__(self, *, group: str, topic: str, kafka: KafkaSettings, profile: ConsumerProfile = "idle",
                 on_assigned: Partitions | None = None, on_revoked: Partitions | None = None,
                 on_lost: Partitions | None = None, config: Mapping[str, Any] | None = None) -> None:
        self.topic = topic
        self._on_assigned = on_assigned or _nothing
        self._on_revoked = on_revoked or _nothing
        self._on_lost = on_lost or self._on_revoked
        self._consumer = clients.consumer(group, kafka, profile=profile, **(config or {}))
        self._consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    def partitions(self) -> list[int]:
        """The topic's partitions (TopicMissing when it does not exist)."""
        return topicreader.partitions(self._consumer, self.topic)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_assigned([tp.partition for tp in partitions])
        held = [TopicPartition(tp.topic, tp.partition, OFFSET_END) for tp in partitions]
        consumer.assign(held)
        consumer.pause(held)  # membership only: else each record written there completes a fetch for nothing

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_revoked([tp.partition for tp in partitions])

    def _lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_lost([tp.partition for tp in partitions])

    def poll(self, timeout: float) -> None:
        """Serve membership and the assignment callbacks for up to `timeout` seconds."""
        self._consumer.poll(timeout)

    def close(self) -> None:
        self._consumer.close()


def _nothing(_partitions: list[int]) -> None:
    return None


class Election:
    """Membership of `group` on `topic`; `leader` while this member holds partition 0."""

    def __init__(self, *, group: str, topic: str, kafka: KafkaSettings, session_ms: int = 6_000,
                 heartbeat_ms: int = 1_500) -> None:
        self.leader = False
        self._member = Membership(group=group, topic=topic, kafka=kafka, on_assigned=self._assigned,
                                  on_revoked=self._revoked, config={"session.timeout.ms": session_ms,
                                                                   "heartbeat.interval.ms": heartbeat_ms})

    def _assigned(self, partitions: list[int]) -> None:
        self.leader = 0 in partitions

    def _revoked(self, _partitions: list[int]) -> None:
        self.leader = False

    def poll(self, timeout: float) -> None:
        """Serve membership and the assignment callbacks for up to `timeout` seconds."""
        self._member.poll(timeout)

    def close(self) -> None:
        self.leader = False
        self._member.close()
