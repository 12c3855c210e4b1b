"""channel.webhook: an HTTP POST of the JSON body, signed under `Reach-Signature` so receivers can verify it.

The signature (`t=<unix>,n=<message_id>,w1=<hmac>`, reach/channels/webhooksig.py) is made with the message
tenant's webhook secret, derived from the operator's, and covers the tenant and the URL as well as the body; the
nonce is the message id, the same on every retry, so a receiver can also dedupe on it. During a rotation the
header carries a `w1` per secret; REACH_CHANNEL_WEBHOOK_LEGACY_V1 adds the old `v1=` (one secret for every
tenant, over `t.n.body` only) for receivers not yet moved, for one release.
A 2xx answer is delivery (SENT and DELIVERED at once). The target is checked by reach/channels/guard.py (public
addresses only, unless REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE); the POST itself is reach/channels/poster.py, shared
with the IM and ticket channels.
"""

from __future__ import annotations

import httpx

from reach.channels import guard
from reach.channels.poster import SIGNATURE_HEADER, HttpChannel, answer_id, compact
from reach.channels.provider import OutboundMessage
from reach.channels.settings import ChannelSettings

__all__ = ["SIGNATURE_HEADER", "WebhookProvider", "body_bytes", "check_endpoint", "destination"]
destination = guard.destination


def check_endpoint(endpoint: str) -> str:
    """An absolute http(s) URL with a host."""
    return guard.check_url(endpoint, channel="webhook", example="https://example.com/hooks/reach")


def body_bytes(message: OutboundMessage) -> bytes:
    """The exact bytes posted and signed."""
    return compact(message.body)


class PlainBody:
    """The webhook's format: the body as it is; the receiver's id from its JSON `id` or X-Request-Id."""

    name = "plain"

    def payload(self, message: OutboundMessage) -> object:
        return message.body

    def provider_id(self, response: httpx.Response) -> str | None:
        return answer_id(response, "id")


class WebhookProvider(HttpChannel):
    """POSTs the body as it is."""

    channel = "webhook"

    def __init__(self, settings: ChannelSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 resolver: guard.Resolver = guard.resolve) -> None:
        super().__init__(settings, channel="webhook", format=PlainBody(), transport=transport, resolver=resolver)
