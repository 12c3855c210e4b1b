"""The signed, SSRF-guarded HTTP POST every URL channel sends with (webhook, IM, ticket), and the provider built on
it: one `HttpChannel` per channel, its request body and answer read by a `Format` (the provider interface: Slack
for IM, generic JSON for tickets, the plain body for webhooks).

Each POST carries `Reach-Message-Id`, `Reach-Trace-Id`, `Reach-Tenant` and `Reach-Signature` (the tenant's
webhook secret over tenant, URL and body: reach/channels/webhooksig.py), goes only to the address the guard
checked (reach/channels/guard.py), and its answer is classified as a value (reach/channels/provider.py). The
receiver's answer is read up to RECEIVER_ANSWER_BYTES (reach/bodylimit.py): a bigger one is a PERMANENT
`ANSWER_TOO_LARGE`, never the shared channel agent's memory.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from reach.bodylimit import RECEIVER_ANSWER_BYTES, AnswerTooLarge, bound
from reach.channels import guard, webhooksig
from reach.channels.errors import ChannelMisconfigured
from reach.channels.http import transport_failure
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent, classify_status
from reach.channels.settings import ChannelSettings
from reach.signing import digest

SIGNATURE_HEADER = "Reach-Signature"
MESSAGE_ID_HEADER = "Reach-Message-Id"
TRACE_ID_HEADER = "Reach-Trace-Id"
REPLY_TO_HEADER = "Reach-Reply-To"
# the extra headers a request may give its POST (lower-case): an A2A push notification's token; any other is
# refused, so a caller cannot set Host, Content-Type or a forged signature
EXTRA = frozenset({"x-a2a-notification-token"})


def compact(data: object) -> bytes:
    """The exact bytes posted and signed: compact JSON, keys sorted."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


class SignedPoster:
    """POSTs with httpx (one pooled client per instance) to guarded targets, signed with the tenant's secret."""

    def __init__(self, settings: ChannelSettings, *, channel: str, transport: httpx.AsyncBaseTransport | None = None,
                 resolver: guard.Resolver = guard.resolve) -> None:
        if settings.webhook_secret is None or not settings.webhook_secret.get_secret_value():
            raise ChannelMisconfigured(f"channel.{channel} needs REACH_CHANNEL_WEBHOOK_SECRET (the HMAC secret "
                                       "receivers verify Reach-Signature with); set it and start again.")
        self.channel = channel
        self._secret = settings.webhook_secret.get_secret_value().encode()
        previous = settings.webhook_previous_secret.get_secret_value() if settings.webhook_previous_secret else ""
        self._secrets = [self._secret, *([previous.encode()] if previous else [])]
        self._legacy_v1 = settings.webhook_legacy_v1
        self._client = bound(httpx.AsyncClient(timeout=settings.timeout_s, transport=transport,
                                               follow_redirects=False),
                             RECEIVER_ANSWER_BYTES, f"a channel.{channel} receiver")
        self._allow_private = settings.webhook_allow_private
        self._resolve = resolver

    def signature(self, message: OutboundMessage, body: bytes, t: int) -> str:
        """`Reach-Signature`: a `w1` per secret for the message's tenant and URL (and the legacy `v1` if asked)."""
        value = webhooksig.sign(self._secrets, t=t, nonce=message.message_id, tenant=message.tenant,
                                endpoint=message.endpoint, body=body)
        if self._legacy_v1:
            value += f",v1={digest(self._secret, body, t, message.message_id)}"
        return value

    async def post(self, message: OutboundMessage, body: bytes) -> httpx.Response | Failure:
        """The receiver's 2xx answer, or the classified failure (refused target, transport, non-2xx status)."""
        checked = await guard.checked_target(message.endpoint, resolver=self._resolve,
                                             allow_private=self._allow_private, channel=self.channel)
        if isinstance(checked, Failure):
            return checked
        url, extensions = guard.pinned(message.endpoint, checked)
        headers = {"Content-Type": "application/json", MESSAGE_ID_HEADER: message.message_id,
                   TRACE_ID_HEADER: message.trace_id, webhooksig.TENANT_HEADER: message.tenant,
                   SIGNATURE_HEADER: self.signature(message, body, int(time.time()))}
        if message.reply_url:
            headers[REPLY_TO_HEADER] = message.reply_url
        for name, value in message.headers:
            if name.lower() not in EXTRA or "\r" in value or "\n" in value:
                return Failure(FailureKind.PERMANENT, "BAD_HEADER", f"header {name[:60]!r} may not be set on a "
                               f"request of channel.{self.channel} (allowed: {', '.join(sorted(EXTRA))}); not retried")
            headers[name] = value
        if checked is not None:
            headers["Host"] = urlsplit(message.endpoint).netloc.rpartition("@")[2]
        try:
            response = await self._client.post(url, content=body, headers=headers, extensions=extensions)
        except AnswerTooLarge as exc:  # it was posted: another attempt would post it again, to the same answer
            return Failure(FailureKind.PERMANENT, "ANSWER_TOO_LARGE", f"{exc}; not retried")
        except httpx.HTTPError as exc:
            return transport_failure(exc, message.endpoint)
        failure = classify_status(response.status_code, retry_after=response.headers.get("Retry-After"))
        return failure if failure is not None else response

    async def aclose(self) -> None:
        await self._client.aclose()


class Format(Protocol):
    """A provider interface of a URL channel: the request body for a message, and the provider's id in its answer."""

    name: str

    def payload(self, message: OutboundMessage) -> object: ...

    def provider_id(self, response: httpx.Response) -> str | None:
        """The provider's id of what it created (a ticket key, a message ts), when its answer names one."""
        ...


def answer_id(response: httpx.Response, *keys: str) -> str | None:
    """The first of `keys` a JSON answer names (a string or a number), else an X-Request-Id header."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in keys:
            if isinstance(data.get(key), (str, int)) and str(data[key]):
                return str(data[key])[:200]
    return response.headers.get("X-Request-Id")


def chosen(providers: dict[str, Format], name: str, *, variable: str) -> Format:
    """The provider `name` of a channel's PROVIDERS, else ChannelMisconfigured naming the variable and the choices."""
    found = providers.get(name)
    if found is None:
        raise ChannelMisconfigured(f"{variable}={name!r} is not a provider of this channel; expected one of "
                                   f"{', '.join(providers)}.")
    return found


class HttpChannel:
    """A Provider over SignedPoster and a Format: the 2xx answer is delivery (SENT and DELIVERED at once)."""

    def __init__(self, settings: ChannelSettings, *, channel: str, format: Format,
                 transport: httpx.AsyncBaseTransport | None = None, resolver: guard.Resolver = guard.resolve) -> None:
        self.channel = channel
        self.format = format
        self.poster = SignedPoster(settings, channel=channel, transport=transport, resolver=resolver)

    def signature(self, message: OutboundMessage, body: bytes, t: int) -> str:
        return self.poster.signature(message, body, t)

    async def send(self, message: OutboundMessage) -> SendOutcome:
        answer = await self.poster.post(message, compact(self.format.payload(message)))
        if isinstance(answer, Failure):
            return answer
        return Sent(provider_message_id=self.format.provider_id(answer) or message.message_id, delivered=True)

    async def delivered(self, sent: Sent) -> bool:
        return sent.delivered

    async def aclose(self) -> None:
        await self.poster.aclose()


def text_of(body: dict[str, Any], subject: str = "") -> str:
    """A message's text for a person: the body's `text` when it is a string, else the body as indented JSON."""
    text = body.get("text")
    if isinstance(text, str):
        return text
    shown = {k: v for k, v in body.items() if k != "reply_to"}
    return (f"{subject}\n" if subject else "") + json.dumps(shown, indent=2, sort_keys=True)
