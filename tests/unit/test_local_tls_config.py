"""`reach local up --tls` without processes: the certificates, the broker's listeners, Redis's TLS config, the
exports (which the settings accept) and the shapes a home refuses (docs/decisions/0038-tls-and-auth-on-every-hop.md)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509

from reach.errors import ConfigError, InfraUnavailable
from reach.settings import KafkaSettings, RedisSettings
from reach.tooling.local import certs
from reach.tooling.local.infra import LocalInfra, LocalStatus, _cluster_properties, _probe_config, _server_properties
from reach.tooling.local.redisnodes import redis_config
from reach.tooling.local.tls import TlsSetup, broker_listeners


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.fixture
def setup(tmp_path: Path) -> TlsSetup:
    return TlsSetup(bootstrap="127.0.0.1:9094", redis_port=6390, files=certs.ensure(tmp_path / "tls"),
                    kafka_password="kpw", redis_password="r/pw@1")


def test_the_certificate_is_signed_by_the_ca_for_loopback_and_its_keys_are_private(tmp_path: Path) -> None:
    files = certs.ensure(tmp_path / "tls")
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    for key in (files.key, files.directory / "ca-key.pem"):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600


def test_a_later_up_keeps_valid_files_and_renews_a_certificate_about_to_expire(tmp_path: Path) -> None:
    first = certs.ensure(tmp_path / "tls")
    cert, ca = first.cert.read_bytes(), first.ca.read_bytes()
    assert certs.ensure(tmp_path / "tls").cert.read_bytes() == cert
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=certs.CERT_DAYS - 10)
    renewed = certs.ensure(tmp_path / "tls", now=later)
    assert renewed.cert.read_bytes() != cert and renewed.ca.read_bytes() == ca, "the CA clients trust stays"


def test_a_certificate_not_signed_by_the_ca_next_to_it_is_replaced(tmp_path: Path) -> None:
    files = certs.ensure(tmp_path / "tls")
    other = certs.ensure(tmp_path / "other")
    files.cert.write_bytes(other.cert.read_bytes())
    again = certs.ensure(tmp_path / "tls")
    x509.load_pem_x509_certificate(again.cert.read_bytes()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(again.ca.read_bytes()))


def test_the_broker_has_no_plaintext_listener_and_a_mutual_tls_controller(setup: TlsSetup) -> None:
    props = _props(_server_properties(Path("/d"), 9094, 9095, tls=setup))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:9094"
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["ssl.keystore.type"] == "PEM" and props["ssl.truststore.location"] == str(setup.files.ca)
    assert "PLAINTEXT://" not in broker_listeners(setup, port=9094, controller_port=9095)
    assert 'username="reach" password="kpw"' in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert props["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----\\n")  # one properties line


def test_the_scram_user_is_made_at_format_time_for_both_mechanisms(setup: TlsSetup) -> None:
    assert setup.scram_arguments() == ["--add-scram", "SCRAM-SHA-256=[name=reach,password=kpw]",
                                       "--add-scram", "SCRAM-SHA-512=[name=reach,password=kpw]"]


def test_redis_listens_on_tls_only_with_the_default_user_off_and_no_clear_password(setup: TlsSetup,
                                                                                   tmp_path: Path) -> None:
    conf = redis_config(port=6390, data=tmp_path, tls=setup).splitlines()
    assert "port 0" in conf and "tls-port 6390" in conf and "user default off" in conf
    assert f'tls-ca-cert-file "{setup.files.ca}"' in conf
    assert any(line.startswith("user reach on #") for line in conf)
    assert setup.redis_password not in "\n".join(conf)


def test_the_exports_are_accepted_by_the_settings_and_carry_the_ca(setup: TlsSetup,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in setup.exports().items():
        monkeypatch.setenv(name, value)
    kafka = KafkaSettings()
    conf = kafka.librdkafka()
    assert conf["security.protocol"] == "SASL_SSL" and conf["ssl.ca.location"] == str(setup.files.ca)
    assert conf["sasl.username"] == "reach" and conf["sasl.password"] == "kpw"
    url = RedisSettings().url()
    assert url.startswith("rediss://reach:r%2Fpw%401@127.0.0.1:6390/0?ssl_ca_certs=")


def test_json_status_never_shows_a_password(setup: TlsSetup) -> None:
    status = LocalStatus(bootstrap=setup.bootstrap, redis_url=setup.redis_url, kafka_running=True,
                         redis_running=True, tls=setup)
    shown = str(status.as_dict())
    assert "kpw" not in shown and "r%2Fpw" not in shown and str(setup.files.ca) in shown
    assert "REACH_SASL_PASSWORD=kpw" in status.exports()


def test_the_probe_of_a_tls_home_speaks_sasl_ssl_whatever_the_environment(setup: TlsSetup,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_SECURITY_PROTOCOL", "PLAINTEXT")
    conf = _probe_config(setup.bootstrap, tls=setup)
    assert conf["security.protocol"] == "SASL_SSL" and conf["ssl.ca.location"] == str(setup.files.ca)


def test_each_node_of_a_tls_cluster_is_a_tls_broker_that_replicates_over_sasl_ssl(setup: TlsSetup) -> None:
    voters = "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    props = _props(_cluster_properties(Path("/d"), node_id=2, port=9002, controller_port=9102, voters=voters,
                                       brokers=3, tls=setup))
    assert props["controller.quorum.voters"] == voters and props["node.id"] == "2"
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:9002"
    assert props["inter.broker.listener.name"] == "SASL_SSL"  # replication between nodes is encrypted and logged in
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert props["listener.name.controller.ssl.client.auth"] == "required"  # the quorum: mutual TLS, one CA
    assert props["ssl.truststore.location"] == str(setup.files.ca)
    assert props["offsets.topic.replication.factor"] == "3" and props["transaction.state.log.min.isr"] == "2"
    assert "PLAINTEXT://" not in "\n".join(f"{k}={v}" for k, v in props.items() if "listener" in k)


@pytest.mark.parametrize(("kwargs", "says"), [({"sasl": True}, "drop --sasl"),
                                              ({"redis_cluster": 3}, "single Redis"),
                                              ({"redis_cluster": 3, "brokers": 3}, "Drop --redis-cluster")])
def test_tls_refuses_shapes_it_does_not_run(tmp_path: Path, kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LocalInfra(tmp_path).up(tls=True, **kwargs)  # type: ignore[arg-type]


def test_a_plaintext_home_is_not_switched_to_tls(tmp_path: Path) -> None:
    (tmp_path / "local.json").write_text('{"kafka_port": 9092}')
    with pytest.raises(ConfigError, match="plaintext broker and Redis"):
        LocalInfra(tmp_path).up(tls=True)


def test_a_process_without_the_exports_is_told_to_take_them_from_local_status(tmp_path: Path) -> None:
    (tmp_path / "local.json").write_text('{"tls": true, "bootstrap": "127.0.0.1:9094", '
                                         '"redis_url": "rediss://reach:pw@127.0.0.1:6390/0"}')
    with pytest.raises(InfraUnavailable, match=r"reach local status"):
        KafkaSettings.model_construct(home=tmp_path, bootstrap=None, security_protocol="PLAINTEXT").servers()
    with pytest.raises(InfraUnavailable, match=r"Redis serves TLS"):
        RedisSettings(home=tmp_path).url()


def test_a_home_with_a_plaintext_redis_is_not_switched_to_tls(tmp_path: Path) -> None:
    (tmp_path / "local.json").write_text('{"redis_port": 6379}')
    with pytest.raises(ConfigError, match="plaintext broker and Redis"):
        LocalInfra(tmp_path).up(tls=True)
