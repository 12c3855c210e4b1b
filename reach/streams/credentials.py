"""faust's broker options from KafkaSettings: the same servers, SASL and TLS that every librdkafka client gets."""

from __future__ import annotations

from typing import Any

from reach.settings import KafkaSettings


def faust_broker_options(kafka: KafkaSettings) -> dict[str, Any]:
    """`broker` and `broker_credentials` for `faust.App(...)` (aiokafka reads SASL/TLS from the credentials)."""
    import faust

    context = kafka.ssl_context()
    credentials: Any = None
    if kafka.uses_sasl:
        assert kafka.sasl_password is not None  # KafkaSettings refuses SASL without one
        credentials = faust.SASLCredentials(username=kafka.sasl_username,
                                            password=kafka.sasl_password.get_secret_value(),
                                            mechanism=kafka.sasl_mechanism, ssl_context=context)
    elif context is not None:
        credentials = faust.SSLCredentials(context)
    return {"broker": kafka.faust_broker(), "broker_credentials": credentials}
