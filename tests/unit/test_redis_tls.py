"""A TLS Redis from settings: REACH_REDIS_CA_FILE rides on the URL every client is built from, and a refused
handshake or login is one clear InfraUnavailable (CLI exit 4) that never shows the password."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import redis

from reach import redisclient
from reach.errors import ConfigError, InfraUnavailable
from reach.settings import RedisSettings

URL = "rediss://reach:s3cret@127.0.0.1:6390/0"


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def test_the_ca_file_rides_on_the_url_so_every_client_and_child_verifies_with_it(ca: Path) -> None:
    url = RedisSettings(redis_url=URL, redis_ca_file=ca).url()
    assert url == f"{URL}?ssl_ca_certs={str(ca).replace('/', '%2F')}"
    kwargs = redis.connection.parse_url(url)
    assert kwargs["ssl_ca_certs"] == str(ca) and kwargs["password"] == "s3cret"
    assert RedisSettings(redis_url=url, redis_ca_file=ca).url() == url, "not added twice"


def test_without_a_ca_file_the_url_is_unchanged() -> None:
    assert RedisSettings(redis_url=URL).url() == URL


def test_a_ca_file_with_a_plain_url_or_missing_is_a_config_error(ca: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rediss://"):
        RedisSettings(redis_url="redis://127.0.0.1:6379/0", redis_ca_file=ca)
    with pytest.raises(ConfigError, match="no such file"):
        RedisSettings(redis_url=URL, redis_ca_file=tmp_path / "missing.pem")


def test_where_drops_the_credentials_and_the_query() -> None:
    assert redisclient.where(f"{URL}?ssl_ca_certs=%2Fx") == "rediss://127.0.0.1:6390/0"


def _tls_error() -> redis.ConnectionError:
    try:
        try:
            raise ssl.SSLCertVerificationError("certificate verify failed: self-signed certificate in chain")
        except ssl.SSLError as cause:
            raise redis.ConnectionError("Error 1 connecting to 127.0.0.1:6390.") from cause
    except redis.ConnectionError as exc:
        return exc


def test_a_refused_login_names_the_url_variable_and_not_the_password() -> None:
    said = redisclient.refusal(URL, redis.AuthenticationError("invalid username-password pair or user is disabled."))
    assert said.startswith("Redis authentication failed at rediss://127.0.0.1:6390/0")
    assert "REACH_REDIS_URL" in said and "s3cret" not in said


def test_a_failed_handshake_names_the_ca_variable() -> None:
    said = redisclient.refusal(URL, _tls_error())
    assert said.startswith("Redis TLS handshake failed") and "REACH_REDIS_CA_FILE" in said


def test_a_plain_client_to_a_tls_port_is_told_to_use_rediss() -> None:
    said = redisclient.refusal("redis://127.0.0.1:6390/0", redis.ConnectionError("Connection reset by peer"))
    assert said.startswith("Redis does not answer") and "rediss://" in said


class _Refusing:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def ping(self) -> None:
        raise self.error

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("error", "says"), [(redis.AuthenticationError("WRONGPASS"), "authentication failed"),
                                             (_tls_error(), "TLS handshake failed")])
def test_check_credentials_refuses_a_wrong_password_or_ca(monkeypatch: pytest.MonkeyPatch, error: Exception,
                                                         says: str) -> None:
    monkeypatch.setattr(redisclient, "sync_client", lambda url, **_: _Refusing(error))
    with pytest.raises(InfraUnavailable, match=says):
        redisclient.check_credentials(URL)


def test_check_credentials_lets_an_outage_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def _down(url: str, **_: Any) -> _Refusing:
        calls.append(url)
        return _Refusing(redis.ConnectionError("Connection refused"))

    monkeypatch.setattr(redisclient, "sync_client", _down)
    redisclient.check_credentials(URL)  # workers ride out a Redis that is not up yet
    assert calls == [URL]


def test_a_tls_client_checks_the_servers_host_name_whatever_redis_pys_default() -> None:
    """Issue 37, finding 12: `redis>=5.0` allowed a redis-py that does not check the host name by default."""
    for client in (redisclient.sync_client(URL), redisclient.async_client(URL)):
        assert client.connection_pool.connection_kwargs["ssl_check_hostname"] is True
    plain = redisclient.sync_client("redis://127.0.0.1:6390/0")
    assert "ssl_check_hostname" not in plain.connection_pool.connection_kwargs
    chosen = redisclient.sync_client(URL + "?ssl_check_hostname=false")  # the operator's explicit word still decides
    assert chosen.connection_pool.connection_kwargs["ssl_check_hostname"] is False


def test_the_redis_floor_is_a_release_that_checks_host_names_by_default() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [req] = [Requirement(d) for d in pyproject["project"]["dependencies"] if Requirement(d).name == "redis"]
    assert not req.specifier.contains(Version("5.3")) and req.specifier.contains(Version("6.0"))
