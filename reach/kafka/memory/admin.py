"""The in-memory admin client (reach.kafka.memory): topics, configs, group descriptions; its futures are done."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from reach.kafka.memory.bus import Bus, ClusterMetadata, unknown_topic


@dataclass(frozen=True)
class ConfigValue:
    """One config entry of a described topic (what `.value` callers read)."""

    name: str
    value: str | None


def _done(result: Any = None, error: BaseException | None = None) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return future


class MemoryAdmin:
    """The AdminClient calls Reach makes (topics, configs, group descriptions and offsets); futures are done."""

    def __init__(self, bus: Bus, conf: dict[str, Any] | None = None) -> None:
        self._bus = bus

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._bus.metadata(topic)

    def create_topics(self, new_topics: list[Any], **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        out = {}
        for new in new_topics:
            created = self._bus.create_topic(new.topic, new.num_partitions, dict(new.config or {}))
            out[new.topic] = _done() if created else _done(error=KafkaException(
                KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, f"topic {new.topic} already exists")))
        return out

    def create_partitions(self, new_partitions: list[Any], **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        for new in new_partitions:
            self._bus.add_partitions(new.topic, new.new_total_count)
        return {new.topic: _done() for new in new_partitions}

    def delete_topics(self, topics: list[str], **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        out = {}
        for name in topics:
            try:
                self._bus.delete_topic(name)
                out[name] = _done()
            except KafkaException as exc:
                out[name] = _done(error=exc)
        return out

    def describe_configs(self, resources: list[Any], **_kwargs: Any) -> dict[Any, concurrent.futures.Future[Any]]:
        out = {}
        with self._bus.cond:
            for res in resources:
                topic = self._bus.topics.get(res.name)
                out[res] = (_done({k: ConfigValue(k, v) for k, v in topic.configs.items()}) if topic is not None
                            else _done(error=unknown_topic(res.name)))
        return out

    def incremental_alter_configs(self, resources: list[Any],
                                  **_kwargs: Any) -> dict[Any, concurrent.futures.Future[Any]]:
        with self._bus.cond:
            for res in resources:
                self._bus._topic(res.name).configs.update({e.name: e.value for e in res.incremental_configs})
        return {res: _done() for res in resources}

    def describe_consumer_groups(self, group_ids: list[str],
                                 **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        return {g: _done(self._bus.describe(g)) for g in group_ids}

    def list_consumer_group_offsets(self, requests: Iterable[Any],
                                    **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        return {r.group_id: _done(self._bus.group_offsets(r.group_id)) for r in requests}

    def poll(self, timeout: float | None = None) -> int:
        return 0
