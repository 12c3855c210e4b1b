"""Leader election through a consumer group: the member assigned partition 0 of a topic leads.

The member subscribes to the topic with no intent to read it (its partitions are paused as soon as they are
assigned: another reader folds the topic), so the group coordinator's assignment is the election: exactly one live
member holds partition 0, a member that dies loses it within the session timeout, and a rebalance moves it. `poll`
serves the membership (call it often: it also heartbeats)."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from reach.kafka import clients
from reach.settings import KafkaSettings


class Election:
    """Membership of `group` on `topic`; `leader` while this member holds partition 0."""

    def __init__(self, *, group: str, topic: str, kafka: KafkaSettings, session_ms: int = 6_000,
                 heartbeat_ms: int = 1_500) -> None:
        self.leader = False
        self._consumer = clients.consumer(group, kafka, profile="idle", **{"session.timeout.ms": session_ms,
                                                                           "heartbeat.interval.ms": heartbeat_ms})
        self._consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.leader = any(tp.partition == 0 for tp in partitions)
        consumer.assign(partitions)
        consumer.pause(partitions)  # membership only: the records are read elsewhere

    def _revoked(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self.leader = False

    def poll(self, timeout: float) -> None:
        """Serve membership and the assignment callbacks for up to `timeout` seconds."""
        self._consumer.poll(timeout)

    def close(self) -> None:
        self.leader = False
        self._consumer.close()
