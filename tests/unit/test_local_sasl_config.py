"""`reach local up --sasl`: the broker config and the exports it prints (the default path stays as it was)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach.settings import KafkaSettings
from reach.tooling.local.infra import SASL_MECHANISM, LocalStatus, SaslListener, _probe_config, _server_properties


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_the_default_broker_has_only_its_plaintext_listener() -> None:
    props = _props(_server_properties(Path("/d"), 9092, 9093))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert not any(key.startswith(("sasl.", "listener.name.")) for key in props)


def test_sasl_adds_a_scram_listener_beside_plaintext() -> None:
    props = _props(_server_properties(Path("/d"), 9092, 9093, 9094))
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,"
                                  "CONTROLLER://127.0.0.1:9093")
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094"
    assert props["listener.security.protocol.map"].endswith(",SASL_PLAINTEXT:SASL_PLAINTEXT")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512"
    for mechanism in ("scram-sha-256", "scram-sha-512"):
        assert props[f"listener.name.sasl_plaintext.{mechanism}.sasl.jaas.config"] == (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;")


def test_exports_name_the_sasl_listener_and_its_credentials_which_kafka_settings_accept() -> None:
    sasl = SaslListener(bootstrap="127.0.0.1:9094", username="reach", password="pw")
    status = LocalStatus(bootstrap="127.0.0.1:9092", redis_url="redis://r/0", kafka_running=True, redis_running=True,
                         sasl=sasl)
    env = dict(line.split("=", 1) for line in status.exports().splitlines())
    assert env == {"REACH_BOOTSTRAP": "127.0.0.1:9094", "REACH_REDIS_URL": "redis://r/0",
                   "REACH_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "REACH_SASL_MECHANISM": SASL_MECHANISM,
                   "REACH_SASL_USERNAME": "reach", "REACH_SASL_PASSWORD": "pw"}
    kafka = KafkaSettings(**{k.removeprefix("REACH_").lower(): v for k, v in env.items() if k != "REACH_REDIS_URL"})
    assert kafka.librdkafka()["sasl.mechanism"] == SASL_MECHANISM
    assert "pw" not in str(status.as_dict()), "--json leaves the password out"


def test_the_default_exports_are_unchanged() -> None:
    status = LocalStatus(bootstrap="127.0.0.1:9092", redis_url="redis://r/0", kafka_running=True, redis_running=True)
    assert status.exports() == "REACH_BOOTSTRAP=127.0.0.1:9092\nREACH_REDIS_URL=redis://r/0"


def test_the_probe_ignores_the_callers_security_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("REACH_SASL_USERNAME", "someone-else")
    plain = _probe_config("127.0.0.1:9092")
    assert plain["security.protocol"] == "PLAINTEXT" and "sasl.username" not in plain
    scram = _probe_config("127.0.0.1:9092", SaslListener(bootstrap="127.0.0.1:9094", username="reach", password="pw"))
    assert (scram["bootstrap.servers"], scram["sasl.username"], scram["sasl.password"]) == (
        "127.0.0.1:9094", "reach", "pw")
