"""The SSRF guard of the channels whose caller chooses the URL (webhook, IM, ticket): which addresses a send may
reach, and a URL pinned to the address that was checked.

The host is resolved at send time and a target that is not a public address (loopback, private, link-local,
multicast, reserved, cloud metadata, or an IPv6 address embedding one of those) is refused for good, unless the
operator allows private targets (REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE): the endpoint comes from the caller, and a
channel must not be a way into the platform's own network. The connection goes to the checked address (no second
lookup a DNS server could answer differently).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from reach.channels.errors import BadCallback
from reach.channels.provider import Failure, FailureKind

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
    """Why a channel may not post to this address, or None for a public one. An IPv6 address that embeds
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


def check_url(endpoint: str, *, channel: str, example: str) -> str:
    """An absolute http(s) URL with a host, else BadCallback naming the channel and an example."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadCallback(f"{channel} endpoint {endpoint[:200]!r} is not an http(s) URL with a host; "
                          f"expected e.g. {example}.")
    return endpoint


def destination(endpoint: str) -> str:
    """Where a send goes, for channel health: the receiver's host and port (credentials and path left out)."""
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


async def checked_target(endpoint: str, *, resolver: Resolver, allow_private: bool,
                         channel: str) -> Failure | str | None:
    """A permanent failure when the endpoint's host is (or resolves to) a non-public address, else the checked
    address to connect to (None when private targets are allowed: no check, the URL as given)."""
    if allow_private:
        return None
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    try:
        addresses = await resolver(host, parts.port or (443 if parts.scheme == "https" else 80))
    except OSError as exc:
        return Failure(FailureKind.RETRYABLE, "CONNECT_FAILED", f"cannot resolve {host}: {exc}"[:500])
    for address in addresses:
        why = refused_address(address)
        if why is not None:
            return Failure(FailureKind.PERMANENT, "FORBIDDEN_TARGET",
                           f"{channel} host {host[:200]} resolves to {address}, {why}: {channel} sends go to public "
                           "addresses only (an operator may set REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE=true); "
                           "not retried")
    if not addresses:
        return Failure(FailureKind.RETRYABLE, "CONNECT_FAILED", f"{host[:200]} resolves to no address")
    return addresses[0]
