"""channel.webhook: an HTTP POST of the JSON body, signed under `Reach-Signature` so receivers can verify it.

The signature (`t=<unix>,n=<message_id>,w1=<hmac>`, reach/channels/webhooksig.py) is made with the message
tenant's webhook secret, derived from the operator's, and covers the tenant and the URL as well as the body; the
nonce is the message id, the same on every retry, so a receiver can also dedupe on it. During a rotation the
header carries a `w1` per secret; REACH_CHANNEL_WEBHOOK_LEGACY_V1 adds the old `v1=` (one secret for every
tenant, over `t.n.body` only) for receivers not yet moved, for one release.
A 2xx answer is delivery (SENT and DELIVERED at once). The host is resolved at send time and a target that
is not a public address (loopback, private, link-local, multicast, reserved, cloud metadata) is refused for
good, unless REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE: the endpoint comes from the caller, and the channel must
not be a way into the platform's own network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from reach.channels import webhooksig
from reach.channels.errors import BadCallback, ChannelMisconfigured
from reach.channels.http import transport_failure
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent, classify_status
from reach.channels.settings import ChannelSettings
from reach.signing import digest

SIGNATURE_HEADER = "Reach-Signature"
MESSAGE_ID_HEADER = "Reach-Message-Id"
TRACE_ID_HEADER = "Reach-Trace-Id"
REPLY_TO_HEADER = "Reach-Reply-To"
# the instance-metadata services of AWS (v4, v6 and ECS), GCP/Azure (169.254.169.254) and Alibaba
METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254",
                                                       "100.100.100.200"))
# IPv6 prefixes whose addresses carry an IPv4 address a gateway or the host's stack may reach: the NAT64
# well-known prefix (RFC 6052: the last 32 bits) and the IPv4-compatible form `::a.b.c.d` (deprecated, the
# last 32 bits); 6to4 (2002::/16, RFC 3056) and Teredo are read by ipaddress itself.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215 local-use translation: any IPv4 inside
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """Every address the host resolves to (the system resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, NAT64, 6to4, Teredo, IPv4-compatible), if any."""
    found = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in NAT64 or (ip in IPV4_COMPATIBLE and int(ip) > 1):  # `::` and `::1` are not IPv4-compatible forms
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [a for a in found if a is not None]


def refused_address(address: str) -> str | None:
    """Why a webhook may not be posted to this address, or None for a public one. An IPv6 address that embeds
    an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo, `::a.b.c.d`) is judged by the embedded address too."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id is not part of the address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL:
            return "a local-use NAT64 address (64:ff9b:1::/48)"
        for inner in embedded_ipv4(ip):
            why = refused_address(str(inner))
            if why is not None:
                return f"{why} ({inner}, embedded in an IPv6 address)"
        if ip.ipv4_mapped is not None:
            return None
    for why, hit in (("a cloud metadata address", ip in METADATA), ("a loopback address", ip.is_loopback),
                     ("a link-local address", ip.is_link_local), ("a multicast address", ip.is_multicast),
                     ("a private address", ip.is_private), ("not a public address", not ip.is_global)):
        if hit:
            return why
    return None


def check_endpoint(endpoint: str) -> str:
    """An absolute http(s) URL with a host."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadCallback(f"webhook endpoint {endpoint[:200]!r} is not an http(s) URL with a host; "
                          "expected e.g. https://example.com/hooks/reach.")
    return endpoint


def destination(endpoint: str) -> str:
    """The receiver a webhook goes to, for channel health: its host and port (credentials and path left out)."""
    parts = urlsplit(endpoint)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: the send fails anyway, health keys it apart
        port = 0
    return f"{(parts.hostname or '').lower()}:{port}"


def pinned(endpoint: str, address: str | None) -> tuple[str, dict[str, Any]]:
    """The URL to connect to the checked address (no second lookup the DNS could answer differently: no
    rebinding between the check and the connection), and the request extensions keeping the name for TLS (SNI
    and certificate check); the caller sends the original Host header."""
    if address is None:
        return endpoint, {}
    parts = urlsplit(endpoint)
    literal = f"[{address}]" if ":" in address else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:  # credentials in the endpoint (https://user:pw@host/...) stay: httpx sends them as Basic auth
        netloc = f"{userinfo}@{netloc}"
    extensions: dict[str, Any] = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), extensions


def body_bytes(message: OutboundMessage) -> bytes:
    """The exact bytes posted and signed."""
    return json.dumps(message.body, separators=(",", ":"), sort_keys=True).encode()


class WebhookProvider:
    """POSTs with httpx; one pooled client per instance."""

    channel = "webhook"

    def __init__(self, settings: ChannelSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 resolver: Resolver = resolve) -> None:
        if settings.webhook_secret is None or not settings.webhook_secret.get_secret_value():
            raise ChannelMisconfigured("channel.webhook needs REACH_CHANNEL_WEBHOOK_SECRET (the HMAC secret receivers "
                                       "verify Reach-Signature with); set it and start again.")
        self._secret = settings.webhook_secret.get_secret_value().encode()
        previous = settings.webhook_previous_secret.get_secret_value() if settings.webhook_previous_secret else ""
        self._secrets = [self._secret, *([previous.encode()] if previous else [])]
        self._legacy_v1 = settings.webhook_legacy_v1
        self._client = httpx.AsyncClient(timeout=settings.timeout_s, transport=transport, follow_redirects=False)
        self._allow_private = settings.webhook_allow_private
        self._resolve = resolver

    async def _checked_target(self, endpoint: str) -> Failure | str | None:
        """A permanent failure when the endpoint's host is (or resolves to) a non-public address, else the checked
        address to connect to (None when private targets are allowed: no check, the URL as given)."""
        if self._allow_private:
            return None
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
        try:
            addresses = await self._resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
        except OSError as exc:
            return Failure(FailureKind.RETRYABLE, "CONNECT_FAILED", f"cannot resolve {host}: {exc}"[:500])
        for address in addresses:
            why = refused_address(address)
            if why is not None:
                return Failure(FailureKind.PERMANENT, "FORBIDDEN_TARGET",
                               f"webhook host {host[:200]} resolves to {address}, {why}: webhooks go to public "
                               "addresses only (an operator may set REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE=true); "
                               "not retried")
        if not addresses:
            return Failure(FailureKind.RETRYABLE, "CONNECT_FAILED", f"{host[:200]} resolves to no address")
        return addresses[0]

    def signature(self, message: OutboundMessage, body: bytes, t: int) -> str:
        """`Reach-Signature`: a `w1` per secret for the message's tenant and URL (and the legacy `v1` if asked)."""
        value = webhooksig.sign(self._secrets, t=t, nonce=message.message_id, tenant=message.tenant,
                                endpoint=message.endpoint, body=body)
        if self._legacy_v1:
            value += f",v1={digest(self._secret, body, t, message.message_id)}"
        return value

    async def send(self, message: OutboundMessage) -> SendOutcome:
        checked = await self._checked_target(message.endpoint)
        if isinstance(checked, Failure):
            return checked
        url, extensions = pinned(message.endpoint, checked)
        body = body_bytes(message)
        headers = {"Content-Type": "application/json", MESSAGE_ID_HEADER: message.message_id,
                   TRACE_ID_HEADER: message.trace_id, webhooksig.TENANT_HEADER: message.tenant,
                   SIGNATURE_HEADER: self.signature(message, body, int(time.time()))}
        if message.reply_url:
            headers[REPLY_TO_HEADER] = message.reply_url
        if checked is not None:
            headers["Host"] = urlsplit(message.endpoint).netloc.rpartition("@")[2]
        try:
            response = await self._client.post(url, content=body, headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            return transport_failure(exc, message.endpoint)
        failure = classify_status(response.status_code, retry_after=response.headers.get("Retry-After"))
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
