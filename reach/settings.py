"""Settings, one frozen object per concern, read from REACH_* environment variables.

| variable                  | default                     | meaning                                             |
|---------------------------|-----------------------------|-----------------------------------------------------|
| REACH_BOOTSTRAP           | (local broker of REACH_HOME)| Kafka bootstrap servers                             |
| REACH_REDIS_URL           | (local Redis of REACH_HOME) | Redis URL for leases, caches and counters;          |
|                           |                             | redis+cluster://host:port for a Redis Cluster       |
| REACH_TERMINAL_TTL        | 1800 (30 min, seconds)      | how long Redis keeps a message's first terminal     |
|                           |                             | receipt for the router and timekeeper (the fence)   |
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
| REACH_OPERATOR            | (the OS user)               | who the CLI records on its changes (reach-cli:<name>)|
| REACH_CURRENCY            | USD                         | ISO 4217 currency of usage costs and cost limits    |
| REACH_TENANT_LIMITS       | {}                          | JSON {tenant: ["tokens=2M/month","cost=5.00/day"]}: |
|                           |                             | spend limits per tenant (gateway and router)        |
| REACH_ROUTER_BATCH_WINDOW_MS | 5                        | how long the router waits after a record for more,  |
|                           |                             | to route them as one batch, once batches hold more  |
|                           |                             | than one record (0: never; docs/decisions/0054)     |
| REACH_AGENT_BATCH_WINDOW_MS | 5                         | the same window for an agent instance's inbox reads |
|                           |                             | (0: never; docs/decisions/0056)                     |
| REACH_CANARY_MIN_CALLS    | 10                          | canary-arm calls a step needs before it is judged   |
| REACH_CANARY_TICK_MS      | 1000                        | how often the canary controller applies the rule    |
| REACH_CANARY_REPORT_MS    | 5000                        | how often it rewrites a running canary's progress   |
| REACH_SECURITY_PROTOCOL   | PLAINTEXT                   | PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL          |
| REACH_SASL_MECHANISM      | (none; required with SASL)  | PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512               |
| REACH_SASL_USERNAME       | (none; required with SASL)  | SASL user                                           |
| REACH_SASL_PASSWORD       | (none; required with SASL)  | SASL password (secret)                              |
| REACH_SSL_CA_FILE         | (system trust store)        | PEM file of the CA that signed the broker's cert    |
| REACH_SSL_CERT_FILE       | (none)                      | PEM client certificate (mutual TLS), with the key   |
| REACH_SSL_KEY_FILE        | (none)                      | PEM private key of the client certificate           |
| REACH_SSL_KEY_PASSWORD    | (none)                      | password of that key (secret)                       |
| REACH_SSL_CHECK_HOSTNAME  | true                        | verify the broker's name against its certificate    |
| REACH_REDIS_CA_FILE       | (system trust store)        | PEM file of the CA that signed Redis's certificate  |
|                           |                             | (with a rediss:// REACH_REDIS_URL)                  |
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.core.canarybook import Gate
from reach.core.healthmodel.settings import HealthSettings
from reach.core.retention import RESULT_TTL_S
from reach.core.spend import BadLimit, parse_kind_limit
from reach.core.usage import check_currency
from reach.errors import ConfigError, InfraUnavailable
from reach.kafka import kafkaerrors
from reach.records import SpendLimit

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
    records_write_as: str | None = None  # write records as this release reads them (reach.kafka.writeas, 0048)
    operator: str | None = None  # the name the CLI records on the control records it publishes (`reach audit`)
    currency: str = "USD"  # ISO 4217: what usage costs (micro-units) and cost limits are in (reach.core.usage)
    tenant_limits: dict[str, list[str]] = {}  # tenant -> ["tokens=2M/month", "cost=5.00/day"] (reach.core.spend)
    router_batch_window_ms: float = 5.0  # the router's batch window (reach.kafka.clients.take, decision 0054)
    agent_batch_window_ms: float = 5.0  # the agent inbox's batch window, opened the same way (decision 0056)

    @field_validator("web_token")
    @classmethod
    def _blank_token_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        """`REACH_WEB_TOKEN=""` (or spaces) is no secret: unset, so a wide bind without a real one refuses."""
        return value if value is not None and value.get_secret_value().strip() else None

    @field_validator("currency")
    @classmethod
    def _iso_currency(cls, value: str) -> str:
        try:
            return check_currency(value)
        except ValueError as exc:  # a ConfigError (not a ValueError) reaches the CLI as its own message, exit 2
            raise ConfigError(f"REACH_CURRENCY={value!r}: {exc}.") from None

    @field_validator("tenant_limits")
    @classmethod
    def _limits_parse(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for tenant, texts in value.items():
            try:
                for text in texts:
                    parse_kind_limit(text)
            except BadLimit as exc:
                raise ConfigError(f"REACH_TENANT_LIMITS[{tenant!r}]: {exc}") from None
        return value

    def tenant_spend_limits(self) -> dict[str, tuple[SpendLimit, ...]]:
        """REACH_TENANT_LIMITS parsed: each tenant's spend limits (enforced by the gateway and the router)."""
        return {tenant: tuple(parse_kind_limit(t) for t in texts) for tenant, texts in self.tenant_limits.items()}


def _local_state(home: Path) -> dict[str, Any]:
    state_file = home / "local.json"
    if not state_file.exists():
        return {}
    try:
        data: dict[str, Any] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}
    return data


_LOCAL_TLS = ("The local {what} only, with a password (`reach local up --tls` in {home}), and this process has no "
              "CA or credentials for it. Export them first: eval \"$(reach local status)\".")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SASL_FIELDS = ("sasl_mechanism", "sasl_username", "sasl_password")
_TLS_FIELDS = ("ssl_ca_file", "ssl_cert_file", "ssl_key_file", "ssl_key_password")


def _env(field: str) -> str:
    return f"REACH_{field.upper()}"


def _one_of(value: str, allowed: tuple[str, ...], field: str) -> str:
    normal = value.strip().upper()
    if normal not in allowed:
        raise ConfigError(f"{_env(field)}={value!r} is not supported: expected one of {', '.join(allowed)}.")
    return normal


class KafkaSettings(BaseSettings):
    """How to reach and authenticate to the Kafka broker; the only place that builds client config.

    `librdkafka()` (and `producer()`, `consumer()`) feed every confluent-kafka client, `faust_broker()`
    and `ssl_context()` the faust app (reach/streams/credentials.py): both read the same fields, so the
    router's aiokafka consumers and every librdkafka client authenticate the same way."""

    model_config = _COMMON

    home: Path = Path(".reach")
    """REACH_HOME, where `reach local up` records its broker (the fallback of `servers()`)."""
    bootstrap: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_file: Path | None = None
    ssl_cert_file: Path | None = None
    ssl_key_file: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @field_validator("security_protocol")
    @classmethod
    def _protocol(cls, value: str) -> str:
        return _one_of(value, SECURITY_PROTOCOLS, "security_protocol")

    @field_validator("sasl_mechanism")
    @classmethod
    def _mechanism(cls, value: str | None) -> str | None:
        return None if value is None else _one_of(value, SASL_MECHANISMS, "sasl_mechanism")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        protocol = self.security_protocol
        # ConfigError (not ValueError) passes through pydantic unchanged: the CLI prints it and exits 2
        if self.uses_sasl:
            missing = [_env(f) for f in _SASL_FIELDS if not getattr(self, f)]
            if missing:
                raise ConfigError(f"REACH_SECURITY_PROTOCOL={protocol} needs {', '.join(missing)} "
                                  f"(mechanism one of {', '.join(SASL_MECHANISMS)}).")
        else:
            _unused([f for f in _SASL_FIELDS if getattr(self, f)], protocol, "SASL_PLAINTEXT or SASL_SSL")
        if self.uses_tls:
            if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
                raise ConfigError("A client certificate needs both REACH_SSL_CERT_FILE and REACH_SSL_KEY_FILE "
                                  "(PEM files); set both, or neither for server-only TLS.")
            if self.ssl_key_password and self.ssl_key_file is None:
                raise ConfigError("REACH_SSL_KEY_PASSWORD is set without REACH_SSL_KEY_FILE: set the key file too.")
            for field in ("ssl_ca_file", "ssl_cert_file", "ssl_key_file"):
                path = getattr(self, field)
                if path is not None and not Path(path).is_file():
                    raise ConfigError(f"{_env(field)}={path}: no such file. Expected a PEM file readable here.")
        else:
            unused = [f for f in _TLS_FIELDS if getattr(self, f)]
            _unused(unused + ([] if self.ssl_check_hostname else ["ssl_check_hostname"]), protocol,
                    "SSL or SASL_SSL")
        return self

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def servers(self, home: Path | None = None) -> str:
        """The bootstrap servers: REACH_BOOTSTRAP, else the local broker started by `reach local up`."""
        if self.bootstrap:
            return self.bootstrap
        state = _local_state(home or self.home)
        if state.get("tls") and self.security_protocol != "SASL_SSL":
            raise InfraUnavailable(_LOCAL_TLS.format(home=home or self.home, what="broker serves SASL_SSL"))
        if state.get("bootstrap"):
            return str(state["bootstrap"])
        raise InfraUnavailable(
            "No Kafka broker configured: REACH_BOOTSTRAP is unset and no local broker is running.\n"
            "Start one with `reach local up` (then `eval $(reach local up)`), or export REACH_BOOTSTRAP=host:port."
        )

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        """Base librdkafka config shared by producers, consumers and admin clients."""
        conf: dict[str, Any] = {"bootstrap.servers": self.servers(), **self.security()}
        conf.update(overrides)
        return conf

    def admin(self, **overrides: Any) -> dict[str, Any]:
        """Admin clients (topics, metadata, SCRAM users): the base config."""
        return self.librdkafka(**overrides)

    def security(self) -> dict[str, Any]:
        """The librdkafka security keys (nothing but `security.protocol` on the PLAINTEXT default).

        With SASL or TLS, `error_cb` records refused logins so `clients.check_reachable` fails fast."""
        conf: dict[str, Any] = {"security.protocol": self.security_protocol}
        if self.security_protocol != "PLAINTEXT":
            conf["error_cb"] = kafkaerrors.on_error
        if self.uses_sasl:
            assert self.sasl_password is not None  # checked by _consistent
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
                         "sasl.password": self.sasl_password.get_secret_value()})
        if self.uses_tls:
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_check_hostname else "none"
            for key, path in (("ssl.ca.location", self.ssl_ca_file), ("ssl.certificate.location", self.ssl_cert_file),
                              ("ssl.key.location", self.ssl_key_file)):
                if path is not None:
                    conf[key] = str(path)
            if self.ssl_key_password:
                conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf

    def faust_broker(self) -> list[str]:
        """The bootstrap servers as faust broker URLs (one `kafka://host:port` per server)."""
        return [f"kafka://{server.strip()}" for server in self.servers().split(",") if server.strip()]

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context aiokafka (faust) uses, built from the same files librdkafka gets; None without TLS."""
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(cafile=str(self.ssl_ca_file) if self.ssl_ca_file else None)
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_cert_file is not None and self.ssl_key_file is not None:
            password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            context.load_cert_chain(str(self.ssl_cert_file), str(self.ssl_key_file), password=password)
        return context

    def producer(self, *, profile: ProducerProfile = "hot", **overrides: Any) -> dict[str, Any]:
        """Idempotent, acks=all, Java-compatible murmur2 partitioner (faust locates keys with murmur2).
        `profile` (PRODUCER_PROFILES) says how long records wait for company; `overrides` win over it."""
        if profile not in PRODUCER_PROFILES:
            raise ValueError(f"unknown producer profile {profile!r}: expected one of {', '.join(PRODUCER_PROFILES)}")
        conf = {
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            **PRODUCER_PROFILES[profile],
        }
        conf.update(overrides)
        return self.librdkafka(**conf)

    def consumer(self, group_id: str, *, profile: ConsumerProfile = "hot", **overrides: Any) -> dict[str, Any]:
        """Manual commits only: an offset is committed after everything it caused is acknowledged.
        `profile` (CONSUMER_PROFILES) says how the consumer fetches; `overrides` win over it."""
        conf = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            **CONSUMER_PROFILES[profile],
        }
        conf.update(overrides)
        return self.librdkafka(**conf)


def _unused(fields: list[str], protocol: str, needs: str) -> None:
    if fields:
        raise ConfigError(f"{', '.join(_env(f) for f in fields)} set, but REACH_SECURITY_PROTOCOL={protocol} does "
                          f"not use them: set REACH_SECURITY_PROTOCOL to {needs}, or unset them.")


ConsumerProfile = Literal["hot", "feed", "idle"]

# How each kind of consumer fetches (decision 0025); every consumer names its profile.
# - hot: capability topics, inboxes, replies, one-off reads. The broker answers a fetch as soon as one byte is
#   there (fetch.min.bytes 1); fetch.wait.max.ms only bounds an empty fetch: at 10 ms an idle router + agent
#   kept the broker at 0.32 cores, at 100 ms 0.09.
# - feed: tails of a busy topic whose reader does not need each record within milliseconds (the status fold,
#   the router's state loop, the health and canary receipt readers). Every receipt append used to complete
#   the parked fetch of each of them, a fetch per reader per receipt; waiting for 64 KiB or 50 ms makes a
#   burst one fetch, at most 50 ms late.
# - idle: tails of topics that are mostly quiet (control, cancels, registry, delay tiers, group membership):
#   a record is still answered at once; an empty fetch waits 500 ms.
CONSUMER_PROFILES: dict[ConsumerProfile, dict[str, Any]] = {
    "hot": {"fetch.wait.max.ms": 100},
    "feed": {"fetch.min.bytes": 65_536, "fetch.wait.max.ms": 50},
    "idle": {"fetch.wait.max.ms": 500},
}


ProducerProfile = Literal["hot", "receipts", "feed"]

# How long each kind of producer lets a record wait for company (decision 0052, scripts/producer_cost.py and the
# paired knee run it records); every producer names its profile. Both compress with lz4: alone in its batch a
# 180-byte receipt still takes 15% less log (276 -> 235 bytes), a burst 73% less, and neither the producer's nor
# the broker's CPU told lz4 from none.
# - hot: records someone waits for (a client, the next hop, an operator): the gateway's and the client's
#   publishes, the agent's receipts, the router, resolver, delay tiers, timekeeper, status fold (its replies),
#   cancels, one-off writes. linger.ms 2: a no-op agent's STARTED and COMPLETED, and the sender's envelopes, then
#   share a produce request; at 0 the knee fell from 588 to 447 req/s (4.83 -> 7.17 broker requests and 0.78 ->
#   1.21 ms of broker CPU per request) for ~2 ms less on an ack at low rates. A loop that flushes its batch pays
#   no linger (librdkafka's flush sends at once).
# - receipts: the agent's producer (its receipts, and the retries, dead letters and heartbeats it writes). linger.ms
#   5. librdkafka sends one ProduceRequest per partition, so a receipt alone in its partition's batch is a request
#   of its own, and an agent's receipts spread over every receipts partition (keyed by message_id): at 2 ms a batch
#   of five receipts went out as ~3 requests. 5 ms cut the broker requests per request of the no-op round trip
#   3.61 -> 2.59 at 500/s and 6.23 -> 5.66 at 250/s (decision 0071), for at most 3 ms more on a receipt.
# - feed: records only a view reads, which may sit 20 ms (health records, the audit log): against 2 ms, a steady
#   stream of them cost the broker 27% less CPU per record at 300/s (45% at 1,500/s) and 44% fewer log bytes.
PRODUCER_PROFILES: dict[ProducerProfile, dict[str, Any]] = {
    "hot": {"linger.ms": 2, "compression.type": "lz4"},
    "receipts": {"linger.ms": 5, "compression.type": "lz4"},
    "feed": {"linger.ms": 20, "compression.type": "lz4"},
}


class RedisSettings(BaseSettings):
    """How to reach Redis (leases, result cache, counters: losable without losing a message)."""

    model_config = _COMMON

    home: Path = Path(".reach")
    """REACH_HOME, where `reach local up` records its Redis (the fallback of `url()`)."""
    redis_url: str | None = None
    redis_ca_file: Path | None = None
    """REACH_REDIS_CA_FILE: the CA that signed a TLS Redis's certificate (`url()` hands it to every client)."""
    terminal_ttl: int = Field(default=RESULT_TTL_S, ge=1)
    """Seconds the router and the timekeeper keep a message's first terminal receipt (reach.terminals)."""

    @model_validator(mode="after")
    def _ca_needs_tls(self) -> RedisSettings:
        if self.redis_ca_file is None:
            return self
        if not Path(self.redis_ca_file).is_file():
            raise ConfigError(f"REACH_REDIS_CA_FILE={self.redis_ca_file}: no such file. Expected a PEM file readable "
                              "here (the CA that signed Redis's certificate).")
        if self.redis_url and not urlsplit(self.redis_url).scheme.lower().startswith("rediss"):
            raise ConfigError("REACH_REDIS_CA_FILE is set, but REACH_REDIS_URL is not a TLS URL: use rediss:// "
                              "(rediss+cluster:// for a cluster), or unset REACH_REDIS_CA_FILE.")
        return self

    def url(self, home: Path | None = None) -> str:
        """The Redis URL: REACH_REDIS_URL, else the local Redis started by `reach local up`; `redis+cluster://`
        names a Redis Cluster (reach.redisclient builds the client from it). With REACH_REDIS_CA_FILE the URL
        carries it (`ssl_ca_certs`), so every client built from the URL alone, in this process or a child given
        it, verifies Redis against that CA."""
        return self._with_ca(self._plain_url(home))

    def _plain_url(self, home: Path | None) -> str:
        if self.redis_url:
            return self.redis_url
        state = _local_state(home or self.home)
        if state.get("tls") and self.redis_ca_file is None:
            raise InfraUnavailable(_LOCAL_TLS.format(home=home or self.home, what="Redis serves TLS"))
        if state.get("redis_url"):
            return str(state["redis_url"])
        raise InfraUnavailable(
            "No Redis configured: REACH_REDIS_URL is unset and no local Redis is running.\n"
            "Start one with `reach local up`, or export REACH_REDIS_URL=redis://host:port/0 (a Redis Cluster: "
            "redis+cluster://host:port)."
        )

    def _with_ca(self, url: str) -> str:
        parts = urlsplit(url)
        if self.redis_ca_file is None or not parts.scheme.lower().startswith("rediss"):
            return url
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "ssl_ca_certs"]
        query.append(("ssl_ca_certs", str(self.redis_ca_file)))
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


class CanarySettings(BaseSettings):
    """The canary controller's judgement and pace (reach.core.canarybook, reach.streams.canary.controller)."""

    model_config = SettingsConfigDict(env_prefix="REACH_CANARY_", frozen=True, extra="forbid")

    min_calls: Annotated[int, Field(ge=1)] = 10
    tick_ms: Annotated[int, Field(gt=0)] = 1_000
    report_ms: Annotated[int, Field(gt=0)] = 5_000
    min_callback: Annotated[float, Field(ge=0, le=1)] = 0.95
    callback_grace_ms: Annotated[int, Field(gt=0)] = 60_000

    def gate(self) -> Gate:
        """How a step is judged (reach.core.canarybook)."""
        return Gate(min_calls=self.min_calls, min_callback=self.min_callback,
                    callback_grace_ms=self.callback_grace_ms)


class HealthEnvSettings(BaseSettings, HealthSettings):
    """The health rules' HealthSettings read from REACH_HEALTH_* (reach/core/healthmodel/settings.py documents
    each); the core's model reads no environment, so an entry point builds this one and passes it down."""

    model_config = SettingsConfigDict(env_prefix="REACH_HEALTH_", frozen=True, extra="forbid")
