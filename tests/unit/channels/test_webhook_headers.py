"""A webhook's extra headers: the A2A push token goes out with the post; any other name (or a value with a line
break) is a permanent failure, and nothing is posted."""

from __future__ import annotations

import asyncio

import httpx
from pydantic import SecretStr

from reach.channels.provider import Failure, FailureKind, OutboundMessage, Sent
from reach.channels.settings import ChannelSettings
from reach.channels.webhook import WebhookProvider


async def public(host: str, port: int) -> list[str]:
    return ["93.184.215.14"]


def send(headers: tuple[tuple[str, str], ...]) -> tuple[object, list[httpx.Request]]:
    posted: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(request)
        return httpx.Response(200, json={"id": "r1"})

    provider = WebhookProvider(ChannelSettings(webhook_secret=SecretStr("s")), transport=httpx.MockTransport(answer),
                               resolver=public)
    message = OutboundMessage(endpoint="https://receiver.test/a2a", body={"a": 1}, message_id="m1", trace_id="t1",
                              tenant="acme", headers=headers)
    return asyncio.run(provider.send(message)), posted


def test_the_a2a_token_header_is_sent() -> None:
    outcome, posted = send((("X-A2A-Notification-Token", "tk"),))
    assert isinstance(outcome, Sent)
    assert posted[0].headers["X-A2A-Notification-Token"] == "tk"
    assert posted[0].headers["Reach-Signature"]  # still signed


def test_other_headers_and_line_breaks_are_refused_for_good() -> None:
    for headers in ((("Host", "evil.test"),), (("X-A2A-Notification-Token", "a\r\nHost: evil"),)):
        outcome, posted = send(headers)
        assert isinstance(outcome, Failure) and outcome.kind is FailureKind.PERMANENT and outcome.code == "BAD_HEADER"
        assert posted == []
