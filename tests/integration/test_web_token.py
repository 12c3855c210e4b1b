"""The stream app's views bound beyond loopback require REACH_WEB_TOKEN; reach's own clients send it."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pydantic import SecretStr

from reach.gateway.statusclient import StatusClient
from reach.settings import ReachSettings
from tests.integration.agent_support import reach_cli
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
TOKEN = "t0ken-for-the-views"


def status_of(app: StreamApp, path: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(app.url + path, headers=headers), timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_views_bound_wide_need_the_token(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_WEB_HOST", "0.0.0.0")
    monkeypatch.setenv("REACH_WEB_TOKEN", TOKEN)
    app = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(app.port))
    app.start()  # polls /healthz, which stays open for liveness probes
    try:
        for path in ("/agents", "/metrics", "/messages/nope", "/traces/nope"):
            assert status_of(app, path, None) == 401, path
            assert status_of(app, path, "wrong") == 401, path
        assert status_of(app, "/agents", TOKEN) == 200
        assert status_of(app, "/messages/nope", TOKEN) == 404
        unknown = reach_cli("status", "nope")  # the CLI sends REACH_WEB_TOKEN: a 404, not a 401
        assert unknown.returncode == 2 and "No message" in unknown.stderr
        settings = ReachSettings(web_host="0.0.0.0", web_port=app.port, web_token=SecretStr(TOKEN))

        async def ask() -> int:
            client = StatusClient(settings)
            try:
                return (await client.message("nope"))[0]
            finally:
                await client.aclose()

        assert asyncio.run(ask()) == 404  # the gateway's status reads carry the token too
    finally:
        app.stop()


def test_a_wide_bind_without_a_token_refuses_to_start(namespace: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_WEB_HOST", "0.0.0.0")
    monkeypatch.delenv("REACH_WEB_TOKEN", raising=False)
    started = reach_cli("router", "--interval", "2")
    assert started.returncode == 2 and "REACH_WEB_TOKEN" in started.stderr
