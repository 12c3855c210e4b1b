"""`reach a2a bridge` sends its bearer only to the origin it read the card from, or to an allowed origin; and it
sends nothing to a non-public address on an origin the operator did not name (the channels' SSRF guard)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface
from pydantic import SecretStr

from reach.a2a.bridge import BridgeSettings, call, http_client, origin_of
from reach.agent import BusinessError
from reach.agent.agent import Context
from reach.envelopes import new_envelope


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
    settings = BridgeSettings(bearer=SecretStr("tok"), allow_private=True)  # the names here resolve nowhere
    urls = ["https://agent.example.com/a2a", "https://AGENT.example.com:443/x", "https://evil.example.net/a2a",
            "http://agent.example.com/a2a", "https://agent.example.com:8443/a2a"]
    assert _seen(settings, urls) == [True, True, False, False, False]


def test_an_allow_list_adds_origins() -> None:
    settings = BridgeSettings(bearer=SecretStr("tok"), bearer_origins="https://rpc.example.com, http://10.0.0.5:9000",
                              allow_private=True)
    urls = ["https://rpc.example.com/a2a", "http://10.0.0.5:9000/", "https://other.example.com/"]
    assert _seen(settings, urls) == [True, True, False]
    assert _seen(BridgeSettings(allow_private=True), ["https://agent.example.com/"]) == [False]  # no bearer: none sent


def test_origins_compare_scheme_host_and_port() -> None:
    assert origin_of("https://A.example.com/x?y") == origin_of("https://a.example.com:443") == "https://a.example.com:443"
    assert origin_of("http://a.example.com") == "http://a.example.com:80"


def test_a_card_naming_a_non_public_address_on_another_origin_gets_nothing_and_fails_the_message() -> None:
    """Issue 37, finding 13: the bridge sent to whatever interface URL the remote card named (metadata, loopback)."""
    posted: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(str(request.url))
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {}})

    card = AgentCard(name="x", version="1.0.0", capabilities=AgentCapabilities(streaming=False),
                     supported_interfaces=[AgentInterface(url="http://169.254.169.254/latest/",
                                                          protocol_binding="JSONRPC", protocol_version="1.0")])

    async def run(settings: BridgeSettings) -> object:
        async with http_client("https://agent.example.com/", settings, transport=httpx.MockTransport(answer)) as http:
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            env = new_envelope("ext.x", {"text": "hi"})
            ctx = Context(envelope=env, agent_id="agent://a2a/ext-x", instance_id="i1", _cancelled=lambda: False)
            return await call(client, {"text": "hi"}, ctx, 0.0)

    with pytest.raises(BusinessError) as raised:
        asyncio.run(run(BridgeSettings()))
    assert raised.value.code == "A2A_FORBIDDEN_TARGET" and "REACH_A2A_ALLOW_PRIVATE" in str(raised.value)
    assert posted == []
    with pytest.raises(Exception):  # noqa: B017, PT011 - allowed: it is sent (the fake answers no task)
        asyncio.run(run(BridgeSettings(allow_private=True)))
    assert posted == ["http://169.254.169.254/latest/"]
