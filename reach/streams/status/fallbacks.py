"""The status fold's fallback port (reach.streams.status.ports.Fallbacks): the capability's POLICY `fallback` from
the control topic, and the envelope an agent was handed, read back from its inbox (docs/decisions/0034)."""

from __future__ import annotations

from collections.abc import Callable

from reach.kafka.topicreader import Missing, read_one
from reach.records import Policy
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError


class PolicyFallbacks:
    """`policy` is the worker's view of the control topic (the router's, or a status worker's cache)."""

    def __init__(self, *, policy: Callable[[str], Policy | None], kafka: KafkaSettings) -> None:
        self._policy = policy
        self._kafka = kafka

    def fallback_of(self, capability: str) -> str | None:
        policy = self._policy(capability)
        return policy.fallback if policy is not None else None

    def envelope(self, at: tuple[str, int, int]) -> bytes | None:
        found = read_one("status-fallback", self._kafka, at)
        if found is Missing.PENDING:
            raise StreamsError(f"the envelope at {at} was not read in time; the batch is read again")
        return None if found is Missing.GONE else found
