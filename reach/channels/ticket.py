"""channel.ticket: a ticket (an issue) created through a REST API, the caller's collection URL, in a provider's body.

The provider interface is reach.channels.poster.Format; `json` (REACH_CHANNEL_TICKET_PROVIDER) is the first, a
generic JSON API any tracker can take through a small shim:

    POST <endpoint> {"title", "description", "reference": <message_id>, "trace_id", "fields": <body>, "reply_to"?}
    -> 2xx {"id" | "key": "..."}

`title` is the request's `subject`, else the body's `title`, else `Reach message <id>`; `description` the body's
`description` or `text`, else the body as indented JSON. `reference` is the same on every retry, so a tracker can
refuse a duplicate. Credentials go in the endpoint (`https://user:token@host/...`, sent as Basic auth, masked in
every error text) or the tracker verifies `Reach-Signature` (reach/channels/poster.py). A 2xx with the ticket's id
is SENT and DELIVERED.
"""

from __future__ import annotations

import httpx

from reach.channels import guard
from reach.channels.poster import Format, HttpChannel, answer_id, chosen, text_of
from reach.channels.provider import OutboundMessage
from reach.channels.settings import ChannelSettings

MAX_TITLE = 250


def check_endpoint(endpoint: str) -> str:
    """The tracker's URL that creates a ticket when POSTed to."""
    return guard.check_url(endpoint, channel="ticket", example="https://tracker.example.com/api/projects/OPS/tickets")


class JsonTicketFormat:
    """The generic JSON ticket API."""

    name = "json"

    def payload(self, message: OutboundMessage) -> object:
        body = message.body
        title = message.subject or (body["title"] if isinstance(body.get("title"), str) else "") \
            or f"Reach message {message.message_id}"
        described = body.get("description")
        out: dict[str, object] = {
            "title": title[:MAX_TITLE], "reference": message.message_id, "trace_id": message.trace_id,
            "description": described if isinstance(described, str) else text_of(body),
            "fields": {k: v for k, v in body.items() if k != "reply_to"}}
        if message.reply_url:
            out["reply_to"] = message.reply_url
        return out

    def provider_id(self, response: httpx.Response) -> str | None:
        return answer_id(response, "id", "key")


PROVIDERS: dict[str, Format] = {"json": JsonTicketFormat()}


class TicketProvider(HttpChannel):
    """The ticket channel over the provider REACH_CHANNEL_TICKET_PROVIDER names."""

    def __init__(self, settings: ChannelSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 resolver: guard.Resolver = guard.resolve) -> None:
        super().__init__(settings, channel="ticket",
                         format=chosen(PROVIDERS, settings.ticket_provider, variable="REACH_CHANNEL_TICKET_PROVIDER"),
                         transport=transport, resolver=resolver)
