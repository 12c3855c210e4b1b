"""channel.webhook: an HTTP POST of the JSON body, signed under `Reach-Signature` so receivers can verify it.

The signature is reach.gateway.signing's (`t=<unix>,n=<message_id>,v1=<hmac>` over `t.n.body`), with the
channel's secret; the nonce is the message id, the same on every retry, so a receiver can also dedupe on it.
A 2xx answer is delivery (SENT and DELIVERED at once).
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import httpx

from reach.channels.errors import BadCallback, ChannelMisconfigured
from reach.channels.http import transport_failure
from reach.channels.provider import OutboundMessage, SendOutcome, Sent, classify_status
from reach.channels.settings import ChannelSettings
from reach.gateway.signing import sign

SIGNATURE_HEADER = "Reach-Signature"
MESSAGE_ID_HEADER = "Reach-Message-Id"
TRACE_ID_HEADER = "Reach-Trace-Id"


def check_endpoint(endpoint: str) -> str:
    """An absolute http(s) URL with a host."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadCallback(f"webhook endpoint {endpoint[:200]!r} is not an http(s) URL with a host; "
                          "expected e.g. https://example.com/hooks/reach.")
    return endpoint


def body_bytes(message: OutboundMessage) -> bytes:
    """The exact bytes posted and signed."""
    return json.dumps(message.body, separators=(",", ":"), sort_keys=True).encode()


class WebhookProvider:
    """POSTs with httpx; one pooled client per instance."""

    channel = "webhook"

    def __init__(self, settings: ChannelSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if settings.webhook_secret is None or not settings.webhook_secret.get_secret_value():
            raise ChannelMisconfigured("channel.webhook needs REACH_CHANNEL_WEBHOOK_SECRET (the HMAC secret receivers "
                                       "verify Reach-Signature with); set it and start again.")
        self._secret = settings.webhook_secret.get_secret_value().encode()
        self._client = httpx.AsyncClient(timeout=settings.timeout_s, transport=transport, follow_redirects=False)

    async def send(self, message: OutboundMessage) -> SendOutcome:
        body = body_bytes(message)
        headers = {"Content-Type": "application/json", MESSAGE_ID_HEADER: message.message_id,
                   TRACE_ID_HEADER: message.trace_id,
                   SIGNATURE_HEADER: sign(self._secret, body, int(time.time()), nonce=message.message_id)}
        try:
            response = await self._client.post(message.endpoint, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return transport_failure(exc, message.endpoint)
        failure = classify_status(response.status_code, retry_after=response.headers.get("Retry-After"),
                                  detail=response.text)
        if failure is not None:
            return failure
        return Sent(provider_message_id=_answer_id(response) or message.message_id, delivered=True)

    async def delivered(self, sent: Sent) -> bool:
        return sent.delivered

    async def aclose(self) -> None:
        await self._client.aclose()


def _answer_id(response: httpx.Response) -> str | None:
    """The receiver's id for the delivery, when its answer names one (JSON `id`, or an X-Request-Id header)."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("id"), (str, int)):
        return str(data["id"])[:200]
    return response.headers.get("X-Request-Id")
