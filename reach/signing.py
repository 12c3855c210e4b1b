"""HMAC-SHA256 request signatures (pure): `v2` for requests to the gateway, `v1` for webhooks and old callers.

- v2: `t=<unix>,n=<nonce>,v2=<hex>` over `t.n.METHOD.path?query.body`: the method and the request target are
  covered, so a captured signature cannot be spent on another route, and the nonce is required, so it cannot
  be spent twice. What the gateway checks (docs/http.md, Apps and signatures).
- v1: `t=<unix>[,n=<nonce>],v1=<hex>` over `t.body` or `t.n.body`: the scheme Stripe uses for webhooks; outbound
  webhooks are signed with it, and the gateway accepts it only behind REACH_GATEWAY_ACCEPT_V1 (one release).

Comparison is constant-time; several digests may be sent (a caller mid-rotation signs with each secret it holds)
and any one matching is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from reach.callers import AuthFailure

SCHEME = "v1"
SCHEME_V2 = "v2"
MAX_HEADER_CHARS = 2048
MAX_SIGNATURES = 8  # bounds the HMAC work one request can ask for
_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # int() alone would take "+5", " 5" and "5_000"
_NONCE = re.compile(r"[A-Za-z0-9._~-]{8,128}")  # URL-safe; no ',' or '=' the header syntax uses
_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_SHAPE = "expected t=<unix seconds>,n=<nonce>,v2=<64 hex digits>"


DENIED = AuthFailure(
    reason="the signature does not match a live key: check Reach-Key, the secret, and that v2 is the "
           "HMAC-SHA256 of `t.n.METHOD.path?query.body` over the exact method, target and body bytes sent",
    code="denied",
)


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed signature header: when it was made, the optional nonce, the candidate digests (v1 and v2)."""

    timestamp: int
    nonce: str | None
    digests: tuple[bytes, ...]
    v2: tuple[bytes, ...] = ()


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


def header(t: int, digests: list[str], nonce: str | None = None, scheme: str = SCHEME) -> str:
    """Assemble a header value from hex digests."""
    parts = [f"t={t}"] + ([f"n={nonce}"] if nonce is not None else []) + [f"{scheme}={d}" for d in digests]
    return ",".join(parts)


def request_target(path: str, query: str = "") -> str:
    """The request target as sent on the wire: the percent-encoded path, `?` and the query when there is one."""
    return f"{path}?{query}" if query else path


def request_bytes(*, t: int, nonce: str, method: str, target: str, body: bytes) -> bytes:
    """What a v2 HMAC covers: `t.n.METHOD.path?query.body` (method upper-cased, target as sent)."""
    return f"{t}.{nonce}.{method.upper()}.{target}.".encode() + body


def request_digest(secret: bytes, *, t: int, nonce: str, method: str, target: str, body: bytes) -> str:
    """The hex v2 HMAC-SHA256 under `secret`."""
    signed = request_bytes(t=t, nonce=nonce, method=method, target=target, body=body)
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


def sign_request(secrets: bytes | list[bytes], *, method: str, target: str, body: bytes, t: int,
                 nonce: str) -> str:
    """The v2 header value of one request to the gateway; a list of secrets gives one `v2=` per secret."""
    keys = [secrets] if isinstance(secrets, bytes) else secrets
    digests = [request_digest(k, t=t, nonce=nonce, method=method, target=target, body=body) for k in keys]
    return header(t, digests, nonce, SCHEME_V2)


def _malformed(detail: str) -> AuthFailure:
    return AuthFailure(reason=f"malformed Reach-Signature: {detail}; {_SHAPE}", code="malformed")


def parse(value: str) -> Signature | AuthFailure:
    """Read a header value; unknown schemes (`v0=`, `v3=`) are ignored, as Stripe's receivers do."""
    if len(value) > MAX_HEADER_CHARS:
        return _malformed(f"longer than {MAX_HEADER_CHARS} characters")
    timestamp: int | None = None
    nonce: str | None = None
    digests: list[bytes] = []
    v2: list[bytes] = []
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
        elif name in (SCHEME, SCHEME_V2):
            if not _DIGEST.fullmatch(item):
                return _malformed(f"`{name}` must be 64 hex digits (HMAC-SHA256)")
            (digests if name == SCHEME else v2).append(bytes.fromhex(item))
    if timestamp is None:
        return _malformed("no `t`")
    if not digests and not v2:
        return _malformed("no `v1` or `v2` digest")
    if len(digests) + len(v2) > MAX_SIGNATURES:
        return _malformed(f"more than {MAX_SIGNATURES} digests")
    return Signature(timestamp=timestamp, nonce=nonce, digests=tuple(digests), v2=tuple(v2))


def check_time(sig: Signature, *, now: int, max_age_s: int = 300, max_ahead_s: int = 60) -> AuthFailure | None:
    """None when `t` lies within [now - max_age_s, now + max_ahead_s]."""
    if sig.timestamp < now - max_age_s:
        return AuthFailure(reason=f"the signature's timestamp is more than {max_age_s} s old: sign each request "
                                  "when you send it, with unix seconds from a synchronised clock", code="stale")
    if sig.timestamp > now + max_ahead_s:
        return AuthFailure(reason=f"the signature's timestamp is more than {max_ahead_s} s in the future: "
                                  "check the caller's clock (NTP)", code="stale")
    return None


def _any_equal(expected: bytes, candidates: tuple[bytes, ...]) -> bool:
    found = False
    for candidate in candidates:  # no early exit: the time taken does not say which one matched
        found |= hmac.compare_digest(expected, candidate)
    return found


def matches(secret: bytes, sig: Signature, body: bytes) -> bool:
    """True when any of the header's v1 digests is the HMAC of this body under `secret` (constant-time)."""
    return _any_equal(hmac.new(secret, signed_bytes(body, sig.timestamp, sig.nonce), hashlib.sha256).digest(),
                      sig.digests)


def matches_request(secret: bytes, sig: Signature, *, method: str, target: str, body: bytes) -> bool:
    """True when any of the header's v2 digests covers this method, target and body under `secret`; a header
    without a nonce never matches (v2 requires one)."""
    if sig.nonce is None:
        return False
    signed = request_bytes(t=sig.timestamp, nonce=sig.nonce, method=method, target=target, body=body)
    return _any_equal(hmac.new(secret, signed, hashlib.sha256).digest(), sig.v2)


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

