"""Webhook signatures (pure): one secret per tenant, derived from the operator's, covering tenant and URL.

`Reach-Signature: t=<unix>,n=<message_id>,w1=<hex>[,w1=<hex>]`, each `w1` the HMAC-SHA256, under a tenant's
webhook secret, of `w1.<t>.<n>.<tenant>.<url>.` followed by the body bytes. `url` is the endpoint the webhook
was posted to, without credentials or fragment (`https://host[:port]/path?query` exactly as the caller gave it);
`tenant` is also sent as `Reach-Tenant`. A tenant's secret is `hex(HMAC-SHA256(operator secret,
"reach-webhook-tenant." + tenant))` (`reach channels webhook-secret TENANT` prints it): a receiver holds only its
own tenant's secret, so tenant A's receiver cannot forge a webhook tenant B's receiver accepts, and a
signature taken from one receiver does not verify at another URL or for another tenant.

Rotation: the channel signs with REACH_CHANNEL_WEBHOOK_SECRET and, while it is set,
REACH_CHANNEL_WEBHOOK_PREVIOUS_SECRET too (two `w1=` in one header); a receiver that has either tenant secret
verifies. A receiver checks `t` against its clock (5 minutes) and may dedupe on `n`.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit, urlunsplit

SCHEME = "w1"
TENANT_HEADER = "Reach-Tenant"
MAX_AGE_S = 300


def tenant_secret(operator_secret: bytes, tenant: str) -> bytes:
    """The webhook secret of one tenant's receivers (hex text, as they configure it)."""
    return hmac.new(operator_secret, b"reach-webhook-tenant." + tenant.encode(), hashlib.sha256).hexdigest().encode()


def signed_url(endpoint: str) -> str:
    """The URL a signature covers: the endpoint without its credentials and fragment."""
    parts = urlsplit(endpoint)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], fragment=""))


def content(*, t: int, nonce: str, tenant: str, url: str, body: bytes) -> bytes:
    """The bytes each `w1` digest covers."""
    return f"{SCHEME}.{t}.{nonce}.{tenant}.{url}.".encode() + body


def digest(secret: bytes, *, t: int, nonce: str, tenant: str, url: str, body: bytes) -> str:
    return hmac.new(secret, content(t=t, nonce=nonce, tenant=tenant, url=url, body=body), hashlib.sha256).hexdigest()


def sign(operator_secrets: list[bytes], *, t: int, nonce: str, tenant: str, endpoint: str, body: bytes) -> str:
    """The header value: one `w1=` per operator secret (the current one, and the previous during a rotation)."""
    url = signed_url(endpoint)
    digests = [digest(tenant_secret(s, tenant), t=t, nonce=nonce, tenant=tenant, url=url, body=body)
               for s in operator_secrets]
    return ",".join([f"t={t}", f"n={nonce}", *(f"{SCHEME}={d}" for d in digests)])


def verify(secret: bytes, header: str, *, tenant: str, url: str, body: bytes, now: int,
           max_age_s: int = MAX_AGE_S) -> bool:
    """What a receiver holding its tenant's `secret` checks: a `w1` over this tenant, URL and body, made within
    `max_age_s` of `now` (a reference implementation; docs/channels.md shows the same in a few lines)."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        t = int(fields["t"][0])
        nonce = fields["n"][0]
    except (KeyError, ValueError):
        return False
    if abs(now - t) > max_age_s:
        return False
    expected = digest(secret, t=t, nonce=nonce, tenant=tenant, url=url, body=body)
    return any(hmac.compare_digest(expected, given) for given in fields.get(SCHEME, []))
