"""The IM (Slack payload) and ticket (generic JSON) channels against in-memory HTTP transports: the body each
provider gets, the signature, the provider's id, and the webhook's rules (SSRF guard, classification, secret)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from pydantic import SecretStr

from reach.channels import webhooksig
from reach.channels.catalog import BY_NAME
from reach.channels.errors import BadCallback, ChannelMisconfigured
from reach.channels.im import ImProvider
from reach.channels.poster import SIGNATURE_HEADER
from reach.channels.provider import Failure, FailureKind, OutboundMessage, Sent
from reach.channels.settings import ChannelSettings
from reach.channels.spec import parse
from reach.channels.ticket import TicketProvider

SETTINGS = ChannelSettings(webhook_secret=SecretStr("s3cret"))
MESSAGE = OutboundMessage(endpoint="https://chat.test/hooks/T1/B2", body={"status": "FAILED", "error": "boom"},
                          message_id="m-cb0", trace_id="t1", subject="demo.echo failed", tenant="acme",
                          reply_url="https://reach.test/v1/callbacks/tok")


async def public(host: str, port: int) -> list[str]:
    return ["93.184.215.14"]


def _send(provider: ImProvider | TicketProvider, message: OutboundMessage = MESSAGE) -> Sent | Failure:
    return asyncio.run(provider.send(message))


def test_an_im_message_is_a_signed_slack_payload_naming_the_reach_message() -> None:
    seen: list[httpx.Request] = []

    def hook(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")  # what Slack's incoming webhooks answer

    outcome = _send(ImProvider(SETTINGS, transport=httpx.MockTransport(hook), resolver=public))
    assert outcome == Sent(provider_message_id="m-cb0", delivered=True)
    payload = json.loads(seen[0].content)
    assert payload["text"].startswith("demo.echo failed\n") and '"error": "boom"' in payload["text"]
    assert payload["blocks"] == [{"type": "section", "text": {"type": "mrkdwn", "text": payload["text"]}}]
    assert payload["metadata"] == {"event_type": "reach_message", "event_payload": {
        "message_id": "m-cb0", "trace_id": "t1", "reply_to": "https://reach.test/v1/callbacks/tok"}}
    secret = webhooksig.tenant_secret(b"s3cret", "acme")
    assert webhooksig.verify(secret, seen[0].headers[SIGNATURE_HEADER], tenant="acme", url=MESSAGE.endpoint,
                             body=seen[0].content, now=int(time.time()))
    assert seen[0].headers["Host"] == "chat.test" and seen[0].url.host == "93.184.215.14"  # pinned to the check


def test_an_im_text_body_is_sent_as_it_is_and_cut_at_slacks_limit() -> None:
    seen: list[bytes] = []
    provider = ImProvider(SETTINGS, transport=httpx.MockTransport(
        lambda r: seen.append(r.content) or httpx.Response(200, json={"ts": "1700.01"})), resolver=public)
    short = OutboundMessage(endpoint=MESSAGE.endpoint, body={"text": "hello"}, message_id="m", trace_id="t")
    assert _send(provider, short) == Sent(provider_message_id="1700.01", delivered=True)
    long = OutboundMessage(endpoint=MESSAGE.endpoint, body={"text": "x" * 5_000}, message_id="m", trace_id="t")
    _send(provider, long)
    texts = [json.loads(b)["text"] for b in seen]
    assert texts[0] == "hello" and len(texts[1]) == 3_000 and texts[1].endswith("…")


def test_a_ticket_is_the_generic_json_body_and_its_id_is_the_provider_id() -> None:
    seen: list[httpx.Request] = []

    def tracker(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"key": "OPS-17"})

    message = OutboundMessage(endpoint="https://tracker.test/api/tickets", body={"title": "ignored", "n": 1},
                              message_id="m-t", trace_id="t2", subject="Disk full", tenant="acme")
    outcome = _send(TicketProvider(SETTINGS, transport=httpx.MockTransport(tracker), resolver=public), message)
    assert outcome == Sent(provider_message_id="OPS-17", delivered=True)
    body = json.loads(seen[0].content)
    assert (body["title"], body["reference"], body["trace_id"], body["fields"]) == \
        ("Disk full", "m-t", "t2", {"title": "ignored", "n": 1})
    assert '"n": 1' in body["description"] and "reply_to" not in body
    assert SIGNATURE_HEADER in seen[0].headers


def test_a_ticket_title_falls_back_to_the_body_then_the_message_id() -> None:
    seen: list[dict[str, object]] = []
    provider = TicketProvider(SETTINGS, transport=httpx.MockTransport(
        lambda r: seen.append(json.loads(r.content)) or httpx.Response(200, json={"id": 5})), resolver=public)
    for body in ({"title": "From body", "description": "details"}, {"x": 1}):
        _send(provider, OutboundMessage(endpoint="https://tracker.test/t", body=body, message_id="m9", trace_id="t"))
    assert [(b["title"], b["description"]) for b in seen][0] == ("From body", "details")
    assert seen[1]["title"] == "Reach message m9"


@pytest.mark.parametrize("make", [ImProvider, TicketProvider])
def test_im_and_ticket_keep_the_webhook_rules(make: type[ImProvider] | type[TicketProvider]) -> None:
    async def private(host: str, port: int) -> list[str]:
        return ["10.0.0.7"]

    posted: list[httpx.Request] = []
    guarded = make(SETTINGS, transport=httpx.MockTransport(lambda r: posted.append(r) or httpx.Response(200)),
                   resolver=private)
    refused = _send(guarded)
    assert isinstance(refused, Failure) and (refused.kind, refused.code) == (FailureKind.PERMANENT, "FORBIDDEN_TARGET")
    assert posted == []
    limited = _send(make(SETTINGS, transport=httpx.MockTransport(lambda r: httpx.Response(429)), resolver=public))
    assert isinstance(limited, Failure) and limited.kind is FailureKind.RATE_LIMITED
    with pytest.raises(ChannelMisconfigured, match="REACH_CHANNEL_WEBHOOK_SECRET"):
        make(ChannelSettings())


def test_an_unknown_provider_name_refuses_to_start_naming_the_known_ones() -> None:
    with pytest.raises(ChannelMisconfigured, match="slack"):
        ImProvider(SETTINGS.model_copy(update={"im_provider": "irc"}))
    with pytest.raises(ChannelMisconfigured, match="json"):
        TicketProvider(SETTINGS.model_copy(update={"ticket_provider": "jira"}))


def test_im_and_ticket_are_catalog_channels_with_url_endpoints_and_per_host_health() -> None:
    im, ticket = BY_NAME["im"], BY_NAME["ticket"]
    assert (im.capability, ticket.agent_id) == ("channel.im", "agent://channels/ticket")
    assert im.caller_chosen and ticket.caller_chosen and im.destination("https://chat.test/h") == "chat.test:443"
    spec = parse("im:https://chat.test/hooks/1")
    assert (spec.channel, spec.capability) == ("im", "channel.im")
    backup = parse('{"channel": "ticket", "endpoint": "https://t.test/api", "backup": '
                   '{"channel": "email", "endpoint": "ops@example.com"}}')
    assert backup.backup is not None and backup.backup.channel == "email"
    with pytest.raises(BadCallback, match="im endpoint"):
        parse("im:slack-channel-name")
