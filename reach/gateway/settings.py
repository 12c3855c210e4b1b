"""The gateway's settings, read from REACH_GATEWAY_* environment variables.

| variable                             | default     | meaning                                                  |
|--------------------------------------|-------------|----------------------------------------------------------|
| REACH_GATEWAY_HOST                   | 127.0.0.1   | address `reach gateway` binds                            |
| REACH_GATEWAY_PORT                   | 8080        | port `reach gateway` binds                               |
| REACH_GATEWAY_GRPC_PORT              | (none)      | also serve gRPC (reach.v1.Gateway, docs/grpc.md) on this |
|                                      |             | port of the same host; unset: no gRPC                    |
| REACH_GATEWAY_SECRETS_KEY            | (file)      | Fernet key(s) encrypting app secrets at rest, comma-     |
|                                      |             | separated: the first encrypts, every one decrypts; unset:|
|                                      |             | REACH_HOME/gateway-secrets.key (0600, made by the CLI)   |
| REACH_GATEWAY_SIGNATURE_MAX_AGE      | 300         | seconds a signature's `t` may lie in the past            |
| REACH_GATEWAY_SIGNATURE_MAX_AHEAD    | 60          | seconds `t` may lie in the future (caller clock skew)    |
| REACH_GATEWAY_ACCEPT_V1              | false       | also accept v1 signatures (`t.n.body`, no method or path |
|                                      |             | covered; a nonce still required): for callers not yet on |
|                                      |             | v2, this release only (docs/http.md)                     |
| REACH_GATEWAY_CAPABILITY_RATE        | (none)      | requests/s per capability, summed over every app         |
| REACH_GATEWAY_CAPABILITY_BURST       | (the rate)  | bucket size of that cap                                  |
| REACH_GATEWAY_CAPABILITY_LIMITS      | {}          | JSON per capability, e.g. {"search.web": [500, 1000]}    |
|                                      |             | (rate, burst), overriding the two above                  |
| REACH_GATEWAY_READ_RATE              | 50          | reads/s per app (status, traces, event streams, A2A get /|
|                                      |             | subscribe), a bucket apart from the app's request quota  |
| REACH_GATEWAY_READ_BURST             | 100         | bucket size of that cap                                  |
| REACH_GATEWAY_REDIS_TIMEOUT          | 0.5         | seconds a nonce or quota call to Redis may take          |
| REACH_GATEWAY_BUDGET_WARN            | 0.8         | share of an app's spend limit at which the gateway's     |
|                                      |             | budget warning gauge turns 1 (docs/operations.md)        |
| REACH_GATEWAY_BUDGET_CACHE_S         | 1.0         | seconds an app's spend counts are reused before re-read  |
| REACH_GATEWAY_TLS_CERT_FILE          | (none)      | PEM certificate (chain): serve HTTPS with it and the key |
| REACH_GATEWAY_TLS_KEY_FILE           | (none)      | PEM private key of that certificate                      |
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.errors import ConfigError
from reach.gateway.quotas import Limit


class GatewaySettings(BaseSettings):
    """How the gateway listens, checks signatures and caps capabilities."""

    model_config = SettingsConfigDict(env_prefix="REACH_GATEWAY_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    grpc_port: int | None = Field(default=None, ge=1, le=65535)
    secrets_key: SecretStr | None = None
    signature_max_age: int = Field(default=300, ge=1)
    signature_max_ahead: int = Field(default=60, ge=0)
    accept_v1: bool = False
    capability_rate: float | None = Field(default=None, gt=0)
    capability_burst: int | None = Field(default=None, ge=1)
    capability_limits: dict[str, tuple[float, int]] = {}
    redis_timeout: float = Field(default=0.5, gt=0)
    read_rate: float = Field(default=50.0, gt=0)
    read_burst: int = Field(default=100, ge=1)
    budget_warn: float = Field(default=0.8, gt=0, le=1)
    budget_cache_s: float = Field(default=1.0, ge=0)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    @model_validator(mode="after")
    def _tls_pair(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("HTTPS needs both REACH_GATEWAY_TLS_CERT_FILE and REACH_GATEWAY_TLS_KEY_FILE (PEM files; "
                             "`--tls-cert` and `--tls-key`): set both, or neither to serve plain HTTP.")
        for name, path in (("CERT", self.tls_cert_file), ("KEY", self.tls_key_file)):
            if path is not None and not path.is_file():
                raise ConfigError(f"REACH_GATEWAY_TLS_{name}_FILE={path}: no such file. Expected a PEM file "
                                  "readable here.")
        return self

    @model_validator(mode="after")
    def _limits_make_buckets(self) -> Self:
        for capability, (rate, burst) in self.capability_limits.items():
            if not (math.isfinite(rate) and rate > 0 and burst >= 1):
                raise ValueError(f"REACH_GATEWAY_CAPABILITY_LIMITS[{capability!r}] = [{rate}, {burst}]: "
                                 "expected [rate > 0, burst >= 1], e.g. [500, 1000]")
        return self

    @property
    def read_limit(self) -> Limit:
        """The read bucket of each app."""
        return Limit(rate=self.read_rate, burst=self.read_burst)

    @property
    def nonce_ttl(self) -> int:
        """How long a nonce is remembered: as long as a request carrying it could still be accepted."""
        return self.signature_max_age + self.signature_max_ahead

    def capability_limit(self, capability: str) -> Limit | None:
        """The cap on one capability across every app, or None when it is not capped."""
        if capability in self.capability_limits:
            rate, burst = self.capability_limits[capability]
            return Limit(rate=rate, burst=burst)
        if self.capability_rate is None:
            return None
        return Limit(rate=self.capability_rate,
                     burst=self.capability_burst or max(1, math.ceil(self.capability_rate)))
