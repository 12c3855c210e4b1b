"""`reach a2a bridge` sends its bearer only to the origin it read the card from, or to an allowed origin."""

from __future__ import annotations

import asyncio

import httpx
from pydantic import SecretStr

from reach.a2a.bridge import BridgeSettings, http_client, origin_of


def _seen(settings: BridgeSettings, urls: list[str], card_url: str = "https://agent.example.com/") -> list[bool]:
    """Whether each request carried the Authorization header."""
    carried: list[bool] = []

    def answer(request: httpx.Request) -> httpx.Response:
        carried.append("authorization" in request.headers)
        return httpx.Response(200, json={})

    async def run() -> None:
        async with http_client(card_url, settings, transport=httpx.MockTransport(answer)) as http:
            for url in urls:
                await http.post(url, json={})

    asyncio.run(run())
    return carried


def test_the_bearer_goes_only_to_the_cards_own_origin() -> None:
    """Issue 28, finding 12: the bearer was a default header, sent to whatever interface URL a card named."""
    settings = BridgeSettings(bearer=SecretStr("tok"))
    urls = ["https://agent.example.com/a2a", "https://AGENT.example.com:443/x", "https://evil.example.net/a2a",
            "http://agent.example.com/a2a", "https://agent.example.com:8443/a2a"]
    assert _seen(settings, urls) == [True, True, False, False, False]


def test_an_allow_list_adds_origins() -> None:
    settings = BridgeSettings(bearer=SecretStr("tok"), bearer_origins="https://rpc.example.com, http://10.0.0.5:9000")
    urls = ["https://rpc.example.com/a2a", "http://10.0.0.5:9000/", "https://other.example.com/"]
    assert _seen(settings, urls) == [True, True, False]
    assert _seen(BridgeSettings(), ["https://agent.example.com/"]) == [False]  # no bearer: none sent


def test_origins_compare_scheme_host_and_port() -> None:
    assert origin_of("https://A.example.com/x?y") == origin_of("https://a.example.com:443") == "https://a.example.com:443"
    assert origin_of("http://a.example.com") == "http://a.example.com:80"
