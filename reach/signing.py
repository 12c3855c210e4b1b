"""HMAC-SHA256 request signatures (pure): `t=<unix>[,n=<nonce>],v1=<hex>` over `t.body` or `t.n.body`.

The scheme Stripe uses for webhooks, plus an optional nonce: the gateway checks it on the way in, and the
same functions sign outbound webhooks. Comparison is constant-time; several `v1=` values may be sent
(a caller mid-rotation signs with each secret it holds) and any one matching is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from reach.callers import AuthFailure

SCHEME = "v1"
MAX_HEADER_CHARS = 2048
MAX_SIGNATURES = 8  # bounds the HMAC work one request can ask for
_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # int() alone would take "+5", " 5" and "5_000"
_NONCE = re.compile(r"[A-Za-z0-9._~-]{8,128}")  # URL-safe; no ',' or '=' the header syntax uses
_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_SHAPE = "expected t=<unix seconds>[,n=<nonce>],v1=<64 hex digits>"


DENIED = AuthFailure(
    reason="the signature does not match a live key: check Reach-Key, the secret, and that v1 is the "
           "HMAC-SHA256 of `t.body` (or `t.n.body`) over the exact bytes sent",
    code="denied",
)


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed signature header: when it was made, the optional nonce, the candidate digests."""

    timestamp: int
    nonce: str | None
    digests: tuple[bytes, ...]


def signed_bytes(body: bytes, t: int, nonce: str | None = None) -> bytes:
    """What the HMAC covers: `t.body`, or `t.n.body` with a nonce."""
    prefix = f"{t}." if nonce is None else f"{t}.{nonce}."
    return prefix.encode() + body


def digest(secret: bytes, body: bytes, t: int, nonce: str | None = None) -> str:
    """The hex HMAC-SHA256 of `signed_bytes` under `secret`."""
    return hmac.new(secret, signed_bytes(body, t, nonce), hashlib.sha256).hexdigest()


def sign(secret: bytes, body: bytes, t: int, nonce: str | None = None) -> str:
    """The signature header value for `body` at unix time `t`."""
    return header(t, [digest(secret, body, t, nonce)], nonce)


def sign_with(secrets: list[bytes], body: bytes, t: int, nonce: str | None = None) -> str:
    """One header carrying a `v1=` per secret (a caller rotating keys signs with the old and the new one)."""
    return header(t, [digest(s, body, t, nonce) for s in secrets], nonce)


def header(t: int, digests: list[str], nonce: str | None = None) -> str:
    """Assemble a header value from hex digests."""
    parts = [f"t={t}"] + ([f"n={nonce}"] if nonce is not None else []) + [f"{SCHEME}={d}" for d in digests]
    return ",".join(parts)


def _malformed(detail: str) -> AuthFailure:
    return AuthFailure(reason=f"malformed Reach-Signature: {detail}; {_SHAPE}", code="malformed")


def parse(value: str) -> Signature | AuthFailure:
    """Read a header value; unknown schemes (`v0=`, `v2=`) are ignored, as Stripe's receivers do."""
    if len(value) > MAX_HEADER_CHARS:
        return _malformed(f"longer than {MAX_HEADER_CHARS} characters")
    timestamp: int | None = None
    nonce: str | None = None
    digests: list[bytes] = []
    for part in value.split(","):
        name, eq, item = part.strip().partition("=")
        if not eq:
            return _malformed(f"{part.strip()[:20]!r} is not name=value")
        if name in ("t", "n") and (timestamp if name == "t" else nonce) is not None:
            return _malformed(f"`{name}` appears twice")
        if name == "t":
            if not _TIMESTAMP.fullmatch(item):
                return _malformed("`t` must be unix seconds (digits only)")
            timestamp = int(item)
        elif name == "n":
            if not _NONCE.fullmatch(item):
                return _malformed("`n` must be 8-128 characters of A-Z a-z 0-9 . _ ~ -")
            nonce = item
        elif name == SCHEME:
            if not _DIGEST.fullmatch(item):
                return _malformed("`v1` must be 64 hex digits (HMAC-SHA256)")
            digests.append(bytes.fromhex(item))
    if timestamp is None:
        return _malformed("no `t`")
    if not digests:
        return _malformed("no `v1`")
    if len(digests) > MAX_SIGNATURES:
        return _malformed(f"more than {MAX_SIGNATURES} `v1` values")
    return Signature(timestamp=timestamp, nonce=nonce, digests=tuple(digests))


def check_time(sig: Signature, *, now: int, max_age_s: int = 300, max_ahead_s: int = 60) -> AuthFailure | None:
    """None when `t` lies within [now - max_age_s, now + max_ahead_s]."""
    if sig.timestamp < now - max_age_s:
        return AuthFailure(reason=f"the signature's timestamp is more than {max_age_s} s old: sign each request "
                                  "when you send it, with unix seconds from a synchronised clock", code="stale")
    if sig.timestamp > now + max_ahead_s:
        return AuthFailure(reason=f"the signature's timestamp is more than {max_ahead_s} s in the future: "
                                  "check the caller's clock (NTP)", code="stale")
    return None


def matches(secret: bytes, sig: Signature, body: bytes) -> bool:
    """True when any of the header's digests is the HMAC of this body under `secret` (constant-time)."""
    expected = hmac.new(secret, signed_bytes(body, sig.timestamp, sig.nonce), hashlib.sha256).digest()
    found = False
    for candidate in sig.digests:  # no early exit: the time taken does not say which one matched
        found |= hmac.compare_digest(expected, candidate)
    return found


def verify(secret: bytes, value: str, body: bytes, *, now: int, max_age_s: int = 300,
           max_ahead_s: int = 60) -> Signature | AuthFailure:
    """Parse, check the time window and the HMAC: the parsed signature, or why it is refused."""
    sig = parse(value)
    if isinstance(sig, AuthFailure):
        return sig
    late = check_time(sig, now=now, max_age_s=max_age_s, max_ahead_s=max_ahead_s)
    if late is not None:
        return late
    if not matches(secret, sig, body):
        return DENIED
    return sig

