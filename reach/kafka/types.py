"""The confluent-kafka names the rest of Reach uses (annotations, isinstance checks, error codes, offsets), so that
only reach/kafka imports confluent_kafka itself (tests/unit/test_boundaries.py)."""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "Consumer", "KafkaError", "KafkaException", "Message", "Producer",
           "TopicPartition"]
