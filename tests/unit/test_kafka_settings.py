"""KafkaSettings: SASL and TLS are validated once and exported the same way to librdkafka and to faust."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from reach.errors import ConfigError, InfraUnavailable
from reach.kafka import clients, kafkaerrors
from reach.settings import SASL_MECHANISMS, SECURITY_PROTOCOLS, KafkaSettings
from reach.streams.credentials import faust_broker_options

SCRAM = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "reach",
         "sasl_password": "s3cret"}


@pytest.fixture(autouse=True)
def _no_security_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD", "SSL_CA_FILE",
                 "SSL_CERT_FILE", "SSL_KEY_FILE", "SSL_KEY_PASSWORD", "SSL_CHECK_HOSTNAME"):
        monkeypatch.delenv(f"REACH_{name}", raising=False)


def test_the_plaintext_default_adds_nothing_but_the_protocol() -> None:
    assert KafkaSettings(bootstrap="b:9092").librdkafka() == {"bootstrap.servers": "b:9092",
                                                              "security.protocol": "PLAINTEXT"}


def test_scram_reaches_librdkafka_and_faust_alike() -> None:
    kafka = KafkaSettings(bootstrap="a:1,b:2", **SCRAM)
    conf = kafka.consumer("g")
    assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.username"], conf["sasl.password"]) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "reach", "s3cret")
    assert conf["error_cb"] is kafkaerrors.on_error and kafka.producer()["sasl.password"] == "s3cret"
    options = faust_broker_options(kafka)
    creds = options["broker_credentials"]
    assert options["broker"] == ["kafka://a:1", "kafka://b:2"]
    assert (creds.protocol.value, creds.mechanism.value, creds.username, creds.password, creds.ssl_context) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "reach", "s3cret", None)
    assert "s3cret" not in repr(kafka), "the password is a SecretStr"


def test_names_are_case_insensitive_and_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_SECURITY_PROTOCOL", "sasl_plaintext")
    monkeypatch.setenv("REACH_SASL_MECHANISM", "scram-sha-256")
    monkeypatch.setenv("REACH_SASL_USERNAME", "u")
    monkeypatch.setenv("REACH_SASL_PASSWORD", "p")
    kafka = KafkaSettings(bootstrap="b:1")
    assert (kafka.security_protocol, kafka.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-256")
    assert faust_broker_options(kafka)["broker_credentials"].mechanism.value == "SCRAM-SHA-256"


@pytest.mark.parametrize(("fields", "message"), [
    ({"security_protocol": "KERBEROS"}, "REACH_SECURITY_PROTOCOL='KERBEROS' is not supported: expected one of "
                                        + ", ".join(SECURITY_PROTOCOLS)),
    ({**SCRAM, "sasl_mechanism": "GSSAPI"}, "REACH_SASL_MECHANISM='GSSAPI' is not supported: expected one of "
                                            + ", ".join(SASL_MECHANISMS)),
    ({"security_protocol": "SASL_SSL"}, "needs REACH_SASL_MECHANISM, REACH_SASL_USERNAME, REACH_SASL_PASSWORD"),
    ({**SCRAM, "sasl_password": None}, "SASL_PLAINTEXT needs REACH_SASL_PASSWORD"),
    ({"sasl_username": "u"}, "REACH_SASL_USERNAME set, but REACH_SECURITY_PROTOCOL=PLAINTEXT does not use them"),
    ({**SCRAM, "ssl_ca_file": "/etc/hostname"}, "REACH_SSL_CA_FILE set, but REACH_SECURITY_PROTOCOL=SASL_PLAINTEXT"),
    ({"ssl_check_hostname": False}, "REACH_SSL_CHECK_HOSTNAME set, but REACH_SECURITY_PROTOCOL=PLAINTEXT"),
    ({"security_protocol": "SSL", "ssl_ca_file": "/nope.pem"}, "REACH_SSL_CA_FILE=/nope.pem: no such file"),
    ({"security_protocol": "SSL", "ssl_key_password": "k"}, "REACH_SSL_KEY_PASSWORD is set without REACH_SSL_KEY_FILE"),
])
def test_a_bad_combination_is_a_config_error_naming_the_variables(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        KafkaSettings(bootstrap="b:1", **fields)
    assert message in str(caught.value)


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="needs both REACH_SSL_CERT_FILE and REACH_SSL_KEY_FILE"):
        KafkaSettings(bootstrap="b:1", security_protocol="SSL", ssl_cert_file=cert)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A self-signed CA/client certificate and an encrypted key, made with the openssl command line."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command line is part of the build image (Debian: openssl)"
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj", "/CN=reach-test",
                    "-keyout", str(key), "-out", str(cert), "-passout", "pass:keypass"], check=True,
                   capture_output=True)
    return {"cert": cert, "key": key}


def test_mutual_tls_goes_to_both_clients_from_the_same_files(pki: dict[str, Path]) -> None:
    kafka = KafkaSettings(bootstrap="b:1", security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
                          sasl_password="p", ssl_ca_file=pki["cert"], ssl_cert_file=pki["cert"],
                          ssl_key_file=pki["key"], ssl_key_password="keypass", ssl_check_hostname=False)
    conf = kafka.admin()
    assert conf["ssl.ca.location"] == str(pki["cert"]) and conf["ssl.certificate.location"] == str(pki["cert"])
    assert (conf["ssl.key.location"], conf["ssl.key.password"]) == (str(pki["key"]), "keypass")
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    creds = faust_broker_options(kafka)["broker_credentials"]
    assert creds.protocol.value == "SASL_SSL" and creds.mechanism.value == "PLAIN"
    context: ssl.SSLContext = creds.ssl_context
    assert context.check_hostname is False and context.verify_mode is ssl.CERT_REQUIRED
    assert any(c["subject"] == ((("commonName", "reach-test"),),) for c in context.get_ca_certs())


def test_a_wrong_key_password_fails_when_the_context_is_built(pki: dict[str, Path]) -> None:
    kafka = KafkaSettings(bootstrap="b:1", security_protocol="SSL", ssl_cert_file=pki["cert"],
                          ssl_key_file=pki["key"], ssl_key_password="wrong")
    with pytest.raises(ssl.SSLError):
        kafka.ssl_context()


def test_tls_alone_gives_faust_ssl_credentials_and_verifies_hostnames_by_default() -> None:
    kafka = KafkaSettings(bootstrap="b:1", security_protocol="SSL")
    assert kafka.librdkafka()["ssl.endpoint.identification.algorithm"] == "https"
    creds = faust_broker_options(kafka)["broker_credentials"]
    assert creds.protocol.value == "SSL" and creds.context.check_hostname is True


class _Error:
    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text


class _RefusingAdmin:
    """An admin client whose metadata requests time out while librdkafka reports `error` to the callback."""

    def __init__(self, error: _Error) -> None:
        self.error = error
        self.requests = 0

    def list_topics(self, timeout: float, topic: str | None = None) -> None:
        self.requests += 1
        raise RuntimeError("Failed to get metadata: Local: Broker transport failure")

    def poll(self, timeout: float) -> int:
        kafkaerrors.on_error(self.error)
        return 1


def test_check_reachable_says_authentication_failed_at_the_first_refused_login() -> None:
    admin = _RefusingAdmin(_Error("_AUTHENTICATION", "SASL authentication error: invalid credentials"))
    with pytest.raises(InfraUnavailable, match="Kafka authentication failed: SASL authentication error") as caught:
        clients.check_reachable(admin, timeout=30)  # type: ignore[arg-type]
    assert admin.requests == 1 and "REACH_SASL_PASSWORD" in str(caught.value)


def test_check_reachable_keeps_saying_unreachable_for_other_errors() -> None:
    admin = _RefusingAdmin(_Error("_TRANSPORT", "Connection refused"))
    with pytest.raises(InfraUnavailable, match="does not answer"):
        clients.check_reachable(admin, timeout=0.05)  # type: ignore[arg-type]


def test_a_login_cut_short_on_this_side_is_not_a_refusal() -> None:
    admin = _RefusingAdmin(_Error("_AUTHENTICATION", "GroupCoordinator: SASL authentication error: "
                                  "SaslAuthenticateRequest failed: Local: Broker transport failure"))
    with pytest.raises(InfraUnavailable, match="does not answer"):
        clients.check_reachable(admin, timeout=0.05)  # type: ignore[arg-type]


def test_an_old_refusal_does_not_fail_a_later_check() -> None:
    kafkaerrors.on_error(_Error("_AUTHENTICATION", "long ago"))

    class _Answers:
        def list_topics(self, timeout: float, topic: str | None = None) -> None:
            return None

    clients.check_reachable(_Answers(), timeout=1)  # type: ignore[arg-type]
    assert kafkaerrors.failure_since(float("inf")) is None


def test_check_reachable_says_tls_and_names_the_ca_file_when_the_handshake_fails() -> None:
    admin = _RefusingAdmin(_Error("_SSL", "sasl_ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: "
                                  "certificate verify failed: broker certificate could not be verified"))
    with pytest.raises(InfraUnavailable, match="Kafka TLS handshake failed") as caught:
        clients.check_reachable(admin, timeout=30)  # type: ignore[arg-type]
    assert "REACH_SSL_CA_FILE" in str(caught.value)
