"""Kafka client construction in one place (idempotent murmur2 producers, manual-commit consumers)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from reach.errors import InfraUnavailable
from reach.settings import KafkaSettings


def admin(kafka: KafkaSettings | None = None) -> AdminClient:
    return AdminClient((kafka or KafkaSettings()).librdkafka())


def producer(kafka: KafkaSettings | None = None, **overrides: Any) -> Producer:
    return Producer((kafka or KafkaSettings()).producer(**overrides))


def consumer(group_id: str, kafka: KafkaSettings | None = None, **overrides: Any) -> Consumer:
    return Consumer((kafka or KafkaSettings()).consumer(group_id, **overrides))


def check_reachable(client: AdminClient, timeout: float = 10.0) -> None:
    """Raise InfraUnavailable (exit 4) when no broker answers a metadata request."""
    try:
        client.list_topics(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - librdkafka reports unreachability as a generic KafkaException
        raise InfraUnavailable(
            f"The Kafka broker does not answer ({exc}). Check REACH_BOOTSTRAP or run `reach local up`."
        ) from None
