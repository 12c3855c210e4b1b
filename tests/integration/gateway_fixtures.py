"""The gateway set-up the A2A, streaming and multi-turn integration tests share: a gateway with the app `shop` over
the session's stream app (`gateway`), the app's A2A token and an official a2a-sdk client authenticated with it, and
reads of a message's status row through the gateway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import AuthInterceptor, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from cryptography.fernet import Fernet

from reach.a2a.bearer import SCHEME, a2a_token
from tests.integration.agent_support import wait_for
from tests.integration.stream_app import StreamApp
from tests.integration.test_gateway_http import Gateway, create_app


@pytest.fixture
def gateway(stream_app: StreamApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    gw = Gateway(tmp_path, {"shop": create_app("shop")})
    gw.start()
    yield gw
    gw.stop()


class Token(CredentialService):
    """The credential the SDK's AuthInterceptor sends for the cards' `reach-app-key` scheme."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.token if security_scheme_name == SCHEME else None


def shop_token(gateway: Gateway) -> str:
    """The A2A bearer token of the gateway's app `shop`."""
    return a2a_token(gateway.apps["shop"]["key_id"], gateway.apps["shop"]["secret"].encode())


async def sdk_client(url: str, token: str, *, streaming: bool = False) -> Any:
    """The official a2a-sdk client, from the card at `url`, authenticated with `token`."""
    config = ClientConfig(streaming=streaming, httpx_client=httpx.AsyncClient(timeout=60))
    return await ClientFactory(config).create_from_url(url, interceptors=[AuthInterceptor(Token(token))])


def row_of(gateway: Gateway, mid: str) -> dict[str, Any] | None:
    got = gateway.get(f"/v1/messages/{mid}")
    return got.json() if got.status_code == 200 else None


def until(gateway: Gateway, mid: str, status: str, *, generation: int = 0) -> dict[str, Any]:
    """The row once it reads `status` in `generation` or a later one (60 s at most)."""
    def reached() -> dict[str, Any] | None:
        row = row_of(gateway, mid)
        return row if row and row["status"] == status and row["generation"] >= generation else None

    return wait_for(reached, 60, f"{mid} {status}", interval=0.2)
