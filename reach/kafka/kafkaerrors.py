"""librdkafka errors that mean the credentials or the TLS set-up are wrong, kept so callers fail fast.

librdkafka treats a failed SASL login as transient: it logs it and reconnects forever, and a metadata
request simply times out as "broker transport failure". KafkaSettings installs `on_error` as the
error callback of every client once SASL or TLS is configured; `check_reachable` asks `failure_since`
to say "authentication failed" within a second instead of "does not answer" after its timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

log = logging.getLogger("reach.kafka")

# librdkafka's names for a refused SASL login and a failed TLS handshake / certificate check
CREDENTIAL_ERRORS = frozenset({"_AUTHENTICATION", "_SSL"})
# ... except when the cause is on this side: a connection closed mid-login ("SaslAuthenticateRequest failed:
# Local: Broker transport failure", seen when a short-lived consumer closes) says nothing about credentials
_LOCAL_CAUSE = "Local: "


class KafkaErrorLike(Protocol):
    """What librdkafka passes to an error callback (confluent_kafka.KafkaError)."""

    def name(self) -> str: ...

    def str(self) -> str: ...


class _Seen:
    """The last credential error of this process and when it happened (monotonic clock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, str] | None = None

    def record(self, message: str) -> None:
        with self._lock:
            self._last = (time.monotonic(), message)

    def since(self, start: float) -> str | None:
        with self._lock:
            if self._last is not None and self._last[0] >= start:
                return self._last[1]
            return None


_SEEN = _Seen()


def on_error(error: KafkaErrorLike) -> None:
    """librdkafka `error_cb`: log every error (as librdkafka would without a callback), keep credential ones."""
    if error.name() in CREDENTIAL_ERRORS and _LOCAL_CAUSE not in error.str():
        _SEEN.record(error.str())
        log.error("Kafka refused the connection: %s", error.str())
        return
    log.warning("Kafka client error: %s", error.str())


def is_tls(message: str) -> bool:
    """Whether a recorded credential error is a failed TLS handshake (an unknown CA, a wrong host name) rather than
    a refused login."""
    return "SSL handshake failed" in message or "certificate verify failed" in message


def failure_since(start: float) -> str | None:
    """The credential error seen at or after `start` (time.monotonic()), if any."""
    return _SEEN.since(start)
