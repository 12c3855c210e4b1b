"""The stream app's views: open on loopback, token required when bound wider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import SecretStr

from reach.errors import ConfigError
from reach.settings import ReachSettings
from reach.streams.webauth import GuardedPages, authorized, is_loopback, required_token
from reach.webclient import auth_headers, views_url


class FakeApp:
    def __init__(self) -> None:
        self.pages: dict[str, Any] = {}

    def page(self, path: str) -> Any:
        def mount(handler: Any) -> Any:
            self.pages[path] = handler
            return handler
        return mount


class FakeWeb:
    def json(self, body: Any, status: int = 200) -> tuple[int, Any]:
        return status, body


class FakeRequest:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


def test_loopback_needs_no_token_and_a_wider_bind_does() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert required_token(ReachSettings(web_host="127.0.0.1")) is None
    with pytest.raises(ConfigError, match="REACH_WEB_TOKEN"):
        required_token(ReachSettings(web_host="0.0.0.0"))
    assert required_token(ReachSettings(web_host="0.0.0.0", web_token=SecretStr("s3"))) == "s3"


def test_a_blank_token_is_unset_and_never_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for blank in ("", "  "):
        monkeypatch.setenv("REACH_WEB_TOKEN", blank)
        assert ReachSettings(web_host="127.0.0.1").web_token is None
        with pytest.raises(ConfigError, match="REACH_WEB_TOKEN"):
            required_token(ReachSettings(web_host="0.0.0.0"))
        assert auth_headers(ReachSettings()) == {}
    assert not authorized("Bearer ", "") and not authorized("Bearer   ", "  ") and not authorized(None, "")
    app = FakeApp()

    @GuardedPages(app, "").page("/messages/{message_id}")
    async def message(web: Any, request: Any, message_id: str) -> Any:
        return web.json({"message_id": message_id})

    assert asyncio.run(app.pages["/messages/{message_id}"](FakeWeb(), FakeRequest({"Authorization": "Bearer "}),
                                                           message_id="m"))[0] == 401


def test_guarded_pages_check_the_bearer_token_except_healthz() -> None:
    app = FakeApp()
    pages = GuardedPages(app, "s3")

    @pages.page("/messages/{message_id}")
    async def message(web: Any, request: Any, message_id: str) -> Any:
        return web.json({"message_id": message_id})

    @pages.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"ok": True})

    view = app.pages["/messages/{message_id}"]
    assert asyncio.run(view(FakeWeb(), FakeRequest({}), message_id="m"))[0] == 401
    assert asyncio.run(view(FakeWeb(), FakeRequest({"Authorization": "Bearer nope"}), message_id="m"))[0] == 401
    assert asyncio.run(view(FakeWeb(), FakeRequest({"Authorization": "Bearer s3"}), message_id="m")) == (
        200, {"message_id": "m"})
    assert asyncio.run(app.pages["/healthz"](FakeWeb(), FakeRequest({})))[0] == 200


def test_clients_send_the_token() -> None:
    settings = ReachSettings(web_host="0.0.0.0", web_port=7000, web_token=SecretStr("s3"))
    assert auth_headers(settings) == {"Authorization": "Bearer s3"}
    assert views_url(settings) == "http://127.0.0.1:7000"
    assert auth_headers(ReachSettings()) == {}
