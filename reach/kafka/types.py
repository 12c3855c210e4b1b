"""The confluent-kafka types runtime code may name, re-exported from this one module (decision 0053).

Runtime modules outside reach.kafka never import confluent_kafka (tests/unit/test_boundaries.py): they read
through the worker (reach.kafka.worker), the clients (reach.kafka.clients) and the readers
(reach.kafka.topicreader), and name these types for annotations, offsets and errors."""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "Consumer", "ConsumerGroupTopicPartitions", "KafkaError",
           "KafkaException", "Message", "Producer", "TopicPartition"]
