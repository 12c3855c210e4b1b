"""The gateway serves HTTPS from a PEM certificate and key (REACH_GATEWAY_TLS_*, `--tls-cert` / `--tls-key`)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from fastapi import FastAPI

from reach.errors import ConfigError
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.server import uvicorn_config
from reach.gateway.settings import GatewaySettings
from reach.tooling.local import certs


def test_uvicorn_loads_the_certificate_and_key(tmp_path: Path) -> None:
    files = certs.ensure(tmp_path)
    config = uvicorn_config(FastAPI(), host="127.0.0.1", port=8443, http=HttpSettings(), tls=(files.cert, files.key))
    config.load()
    assert config.is_ssl and isinstance(config.ssl, ssl.SSLContext)


def test_without_a_certificate_it_serves_plain_http() -> None:
    assert not uvicorn_config(FastAPI(), host="127.0.0.1", port=8080, http=HttpSettings()).is_ssl


def test_a_certificate_without_its_key_is_a_config_error(tmp_path: Path) -> None:
    files = certs.ensure(tmp_path)
    with pytest.raises(ConfigError, match="REACH_GATEWAY_TLS_KEY_FILE"):
        GatewaySettings(tls_cert_file=files.cert)
    with pytest.raises(ConfigError, match="no such file"):
        GatewaySettings(tls_cert_file=files.cert, tls_key_file=tmp_path / "missing.pem")
    assert GatewaySettings(tls_cert_file=files.cert, tls_key_file=files.key).tls_key_file == files.key
