"""Settings, one frozen object per concern, read from REACH_* environment variables.

| variable                  | default                     | meaning                                             |
|---------------------------|-----------------------------|-----------------------------------------------------|
| REACH_BOOTSTRAP           | (local broker of REACH_HOME)| Kafka bootstrap servers                             |
| REACH_REDIS_URL           | (local Redis of REACH_HOME) | Redis URL for leases, caches and counters           |
| REACH_HOME                | .reach                      | state of the embedded broker and Redis              |
| REACH_NAMESPACE           | reach                       | prefix of every topic, group and faust app id       |
| REACH_TOPICS_FILE         | topics.yaml                 | declared topics                                     |
| REACH_SCHEMA_REGISTRY_URL | (none)                      | use Confluent Schema Registry framing when set      |
| REACH_WEB_PORT            | 6066                        | the stream app's HTTP port                          |
| REACH_WEB_HOST            | 127.0.0.1                   | the address it binds and advertises to other workers|
| REACH_WEB_TOKEN           | (none)                      | shared token the views require (`Authorization:     |
|                           |                             | Bearer`) when REACH_WEB_HOST is not loopback        |
| REACH_STATUS_RETENTION    | 604800 (7 days, seconds)    | how long terminal status rows are kept              |
| REACH_STALE_NO_ROUTE      | 86400 (24 h, seconds)       | age at which an unserved NO_ROUTE letter is stale   |
| REACH_CANARY_MIN_CALLS    | 10                          | canary-arm calls a step needs before it is judged   |
| REACH_CANARY_TICK_MS      | 1000                        | how often the canary controller applies the rule    |
| REACH_CANARY_REPORT_MS    | 5000                        | how often it rewrites a running canary's progress   |
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.errors import InfraUnavailable

_COMMON = SettingsConfigDict(env_prefix="REACH_", frozen=True, extra="forbid")


class ReachSettings(BaseSettings):
    """Where Agent-Reach keeps its state and how it names things."""

    model_config = _COMMON

    home: Path = Path(".reach")
    namespace: str = "reach"
    topics_file: Path = Path("topics.yaml")
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    web_token: SecretStr | None = None
    status_retention: int = 7 * 24 * 3600
    stale_no_route: int = 24 * 3600
    schema_registry_url: str | None = None


def _local_state(home: Path) -> dict[str, Any]:
    state_file = home / "local.json"
    if not state_file.exists():
        return {}
    try:
        data: dict[str, Any] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}
    return data


class KafkaSettings(BaseSettings):
    """How to reach the Kafka broker; `librdkafka()` is the one place that builds client config."""

    model_config = _COMMON

    bootstrap: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None

    def servers(self, home: Path | None = None) -> str:
        """The bootstrap servers: REACH_BOOTSTRAP, else the local broker started by `reach local up`."""
        if self.bootstrap:
            return self.bootstrap
        state = _local_state(home or ReachSettings().home)
        if state.get("bootstrap"):
            return str(state["bootstrap"])
        raise InfraUnavailable(
            "No Kafka broker configured: REACH_BOOTSTRAP is unset and no local broker is running.\n"
            "Start one with `reach local up` (then `eval $(reach local up)`), or export REACH_BOOTSTRAP=host:port."
        )

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        """Base librdkafka config shared by producers, consumers and admin clients."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.servers(),
            "security.protocol": self.security_protocol,
        }
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        conf.update(overrides)
        return conf

    def producer(self, **overrides: Any) -> dict[str, Any]:
        """Idempotent, acks=all, Java-compatible murmur2 partitioner (faust locates keys with murmur2)."""
        conf = {
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 2,
            "compression.type": "lz4",
        }
        conf.update(overrides)
        return self.librdkafka(**conf)

    def consumer(self, group_id: str, **overrides: Any) -> dict[str, Any]:
        """Manual commits only: an offset is committed after everything it caused is acknowledged."""
        conf = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # the broker answers a fetch as soon as one byte is there (fetch.min.bytes 1); this only bounds
            # an empty fetch: at 10 ms an idle router + agent kept the broker at 0.32 cores, at 100 ms 0.09
            "fetch.wait.max.ms": 100,
            "allow.auto.create.topics": False,
        }
        conf.update(overrides)
        return self.librdkafka(**conf)


class RedisSettings(BaseSettings):
    """How to reach Redis (leases, result cache, counters: losable without losing a message)."""

    model_config = _COMMON

    redis_url: str | None = None

    def url(self, home: Path | None = None) -> str:
        """The Redis URL: REACH_REDIS_URL, else the local Redis started by `reach local up`."""
        if self.redis_url:
            return self.redis_url
        state = _local_state(home or ReachSettings().home)
        if state.get("redis_url"):
            return str(state["redis_url"])
        raise InfraUnavailable(
            "No Redis configured: REACH_REDIS_URL is unset and no local Redis is running.\n"
            "Start one with `reach local up`, or export REACH_REDIS_URL=redis://host:port/0."
        )


class CanarySettings(BaseSettings):
    """The canary controller's judgement and pace (reach.canary, reach.streams.canary)."""

    model_config = SettingsConfigDict(env_prefix="REACH_CANARY_", frozen=True, extra="forbid")

    min_calls: int = 10
    tick_ms: int = 1_000
    report_ms: int = 5_000
