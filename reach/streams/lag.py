"""Consumer lag per topic and group, read from the broker (committed offsets vs. high watermarks)."""

from __future__ import annotations

from reach.kafka.types import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from reach.streams.groupadmin import GroupRequests


def consumer_lag(admin: GroupRequests, reader: Consumer, groups: list[str],
                 timeout: float = 10.0) -> dict[tuple[str, str], int]:
    """(topic, group) -> messages behind, summed over partitions; groups without commits are skipped."""
    lag: dict[tuple[str, str], int] = {}
    for group in groups:
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
        try:
            committed = futures[group].result(timeout=timeout + 5).topic_partitions or []
        except Exception:  # noqa: BLE001 - an unknown or empty group has no lag to report
            continue
        for tp in committed:
            if tp.offset < 0:
                continue
            high = reader.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout)[1]
            key = (tp.topic, group)
            lag[key] = lag.get(key, 0) + max(0, high - tp.offset)
    return lag
