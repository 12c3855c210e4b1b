"""`reach local up --tls`: the broker's SASL_SSL and controller listeners, Redis's TLS port and ACL user, and the
exports that point every client at them (docs/decisions/0038-tls-and-auth-on-every-hop.md).

Layout: clients reach the broker only through `SASL_SSL://127.0.0.1:<port>` (SCRAM-SHA-512 or -256, server
certificate from the local CA), which is also the inter-broker listener (the broker logs in as the same SCRAM user).
The controller listener is SSL with client certificates required (mutual TLS with the broker's own certificate):
SCRAM cannot authenticate a KRaft controller listener (its credentials live in the metadata the controller serves),
and a plaintext one would let any local process send admin requests to the controller. No PLAINTEXT listener
remains. The SCRAM user is written into the metadata log when the storage is formatted (`--add-scram`), so the
broker starts with it and no admin call over an open listener is needed. Redis listens on a TLS port only
(`port 0`), with the default user off and one ACL user whose password is stored hashed in redis.conf."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import SecretStr

from reach.settings import KafkaSettings
from reach.tooling.local.certs import TlsFiles

USER = "reach"
MECHANISM = "SCRAM-SHA-512"  # what the exports name; the user has SCRAM-SHA-256 credentials as well
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class TlsSetup:
    """The addresses, files and credentials of one REACH_HOME's TLS set-up."""

    bootstrap: str
    redis_port: int
    files: TlsFiles
    kafka_password: str
    redis_password: str
    username: str = USER
    mechanism: str = MECHANISM

    @property
    def redis_url(self) -> str:
        """`rediss://user:password@127.0.0.1:port/0`: the URL every Redis client of Agent-Reach is given."""
        return f"rediss://{self.username}:{quote(self.redis_password, safe='')}@127.0.0.1:{self.redis_port}/0"

    @property
    def redis_url_shown(self) -> str:
        """The Redis URL with its password masked (status output, `--json`)."""
        return f"rediss://{self.username}:***@127.0.0.1:{self.redis_port}/0"

    def exports(self) -> dict[str, str]:
        """Every variable a client needs: the SASL_SSL listener, its SCRAM user, the CA, the TLS Redis and its CA."""
        return {"REACH_BOOTSTRAP": self.bootstrap, "REACH_SECURITY_PROTOCOL": "SASL_SSL",
                "REACH_SASL_MECHANISM": self.mechanism, "REACH_SASL_USERNAME": self.username,
                "REACH_SASL_PASSWORD": self.kafka_password, "REACH_SSL_CA_FILE": str(self.files.ca),
                "REACH_REDIS_URL": self.redis_url, "REACH_REDIS_CA_FILE": str(self.files.ca)}

    def as_dict(self) -> dict[str, Any]:
        """For `--json`: files and user, never a password."""
        return {"bootstrap": self.bootstrap, "security_protocol": "SASL_SSL", "username": self.username,
                "mechanism": self.mechanism, "ca_file": str(self.files.ca), "cert_file": str(self.files.cert),
                "key_file": str(self.files.key), "redis_url": self.redis_url_shown}

    def kafka(self) -> KafkaSettings:
        """Client settings for this broker, whatever the caller's REACH_* environment says."""
        return KafkaSettings.model_construct(bootstrap=self.bootstrap, security_protocol="SASL_SSL",
                                             sasl_mechanism=self.mechanism, sasl_username=self.username,
                                             sasl_password=SecretStr(self.kafka_password),
                                             ssl_ca_file=self.files.ca, ssl_cert_file=None, ssl_key_file=None,
                                             ssl_key_password=None, ssl_check_hostname=True)

    def scram_arguments(self) -> list[str]:
        """`kafka-storage format` arguments that create the SCRAM user in the bootstrap metadata."""
        out: list[str] = []
        for mechanism in SCRAM_MECHANISMS:
            out += ["--add-scram", f"{mechanism}=[name={self.username},password={self.kafka_password}]"]
        return out


def broker_listeners(setup: TlsSetup, *, port: int, controller_port: int) -> str:
    """The listener part of server.properties (listeners, the protocol map, SASL and the key and trust stores)."""
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    # the broker logs in to its own SASL_SSL listener (inter-broker) as the SCRAM user
    own = f'{jaas} username="{setup.username}" password="{setup.kafka_password}";'
    lines = [
        f"listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_SSL",
        "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL",
        f"sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}",
        f"sasl.mechanism.inter.broker.protocol={setup.mechanism}",
        *(f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config={own if m == setup.mechanism else jaas + ';'}"
          for m in SCRAM_MECHANISMS),
        "ssl.keystore.type=PEM",
        f"ssl.keystore.key={_inline(setup.files.key)}",
        f"ssl.keystore.certificate.chain={_inline(setup.files.cert)}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={setup.files.ca}",
        "ssl.endpoint.identification.algorithm=https",
        # mutual TLS on the controller listener: only a holder of a certificate of the local CA talks to it
        "listener.name.controller.ssl.client.auth=required",
    ]
    return "\n".join(lines) + "\n"


def _inline(pem: Path) -> str:
    """A PEM file as one properties value (Kafka's inline PEM store; its file store insists on an encrypted key)."""
    return "\\n".join(pem.read_text().strip().splitlines())


def redis_lines(setup: TlsSetup, port: int) -> list[str]:
    """redis.conf lines: TLS on `port` only, the default user off, one ACL user (its password as SHA-256)."""
    digest = hashlib.sha256(setup.redis_password.encode()).hexdigest()
    return [
        "port 0",
        f"tls-port {port}",
        f'tls-cert-file "{setup.files.cert}"',
        f'tls-key-file "{setup.files.key}"',
        f'tls-ca-cert-file "{setup.files.ca}"',
        "tls-auth-clients no",  # clients prove who they are with the ACL password, not a certificate
        "user default off",
        f"user {setup.username} on #{digest} ~* &* +@all",
    ]
