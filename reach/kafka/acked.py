"""Produce a few records and wait for every acknowledgement: the one-off writes of the CLI, the console and views.

`AckedProducer.send(outputs)` returns what went wrong (empty when every record was acknowledged), so each caller
words its own error for its user. Not for loops: they run on reach.kafka.worker, which acknowledges per batch."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from reach.kafka import clients
from reach.kafka.worker import Output
from reach.settings import KafkaSettings

ACK_TIMEOUT_S = 15.0


class AckedProducer:
    """A producer built on first use (a `memory://` bootstrap gives the in-memory one); thread-safe sends."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka
        self._producer: Any = None
        self._lock = threading.Lock()

    def send(self, outputs: Iterable[Output], *, timeout: float = ACK_TIMEOUT_S) -> list[str]:
        """Produce `outputs` and wait up to `timeout` for their acknowledgements; the errors, or "timed out"."""
        errors: list[str] = []
        answered = 0

        def report(err: Any, _msg: Any) -> None:
            nonlocal answered
            answered += 1
            if err is not None:
                errors.append(str(err))

        with self._lock:
            if self._producer is None:
                self._producer = clients.producer(self._kafka, profile="hot")
            sent = 0
            for out in outputs:
                extra: dict[str, Any] = {} if out.partition is None else {"partition": out.partition}
                self._producer.produce(out.topic, out.value, key=out.key, headers=out.headers, on_delivery=report,
                                       **extra)
                sent += 1
            self._producer.flush(timeout)
        if answered < sent:
            errors.append(f"{sent - answered} of {sent} not acknowledged within {timeout:g} s (timed out)")
        return errors

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(timeout)


def send_acked(kafka: KafkaSettings, outputs: Iterable[Output], *, timeout: float = ACK_TIMEOUT_S) -> list[str]:
    """One-off: produce `outputs` with a producer of their own and wait for every acknowledgement; the errors."""
    producer = AckedProducer(kafka)
    try:
        return producer.send(outputs, timeout=timeout)
    finally:
        producer.close(0)
