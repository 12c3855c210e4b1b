"""Publishing this instance's registration to the compacted registry, on change and every ttl/3."""

from __future__ import annotations

from concurrent.futures import Future

from reach.agent.agent import Agent
from reach.agent.publisher import Sender
from reach.envelopes import now_ms
from reach.kafka import codec
from reach.kafka.types import Message
from reach.records import AgentState


class Heartbeat:
    """Keeps the registry record of one instance current."""

    def __init__(self, agent: Agent, publisher: Sender, *, registry_topic: str, inbox_topic: str) -> None:
        self._agent = agent
        self._publisher = publisher
        self._topic = registry_topic
        self._inbox = inbox_topic
        self._interval_ms = max(100, agent.ttl_ms // 3)
        self._last_ms = 0
        self.state = AgentState.STARTING

    def beat(self, *, inflight: int, partitions: list[int], state: AgentState | None = None) -> Future[Message]:
        """Publish the registration now (optionally moving to `state`)."""
        if state is not None:
            self.state = state
        self._last_ms = now_ms()
        record = self._agent.registration(state=self.state, heartbeat_at=self._last_ms, inbox_topic=self._inbox,
                                          inflight=inflight, assigned_partitions=partitions)
        return self._publisher.send(self._topic, self._agent.instance_id, codec.encode(record))

    def due(self) -> bool:
        """True when the last heartbeat is ttl/3 old."""
        return now_ms() - self._last_ms >= self._interval_ms

    def tombstone(self) -> Future[Message]:
        """Remove this instance from the registry."""
        return self._publisher.send(self._topic, self._agent.instance_id, None)
