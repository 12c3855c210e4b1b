"""The seams between the gateway's HTTP service and what it depends on (apps, nonces, quotas).

The HTTP service (reach.gateway.service) sees only these protocols; the Kafka- and Redis-backed
implementations and the in-memory fakes for unit tests both satisfy them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

CHANNEL_PREFIX = "channel."


@dataclass(frozen=True, slots=True)
class CallerApp:
    """A calling application as the door sees it: who it is, what it may call, how fast."""

    app_id: str
    name: str
    tenant: str
    capabilities: tuple[str, ...]  # empty: every capability except channel.* (those only when listed)
    rate: float  # requests per second (token bucket rate)
    burst: int  # token bucket size

    def may_call(self, capability: str) -> bool:
        # a channel posts to an endpoint the payload names: by default an app could aim the platform anywhere
        if capability.startswith(CHANNEL_PREFIX):
            return capability in self.capabilities
        return not self.capabilities or capability in self.capabilities


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A live key: the app it belongs to and its secret (decrypted in memory, never logged)."""

    key_id: str
    app: CallerApp
    secret: bytes = field(repr=False)  # a logged Verified or KeyEntry must not print it


class AppDirectory(Protocol):
    """Live keys by key id; a revoked key or app is absent."""

    def lookup(self, key_id: str) -> KeyEntry | None: ...

    @property
    def alive(self) -> bool:
        """False once the table stopped following its source: its answers may miss a revocation."""
        ...


class NonceStore(Protocol):
    """Nonces seen within the replay window, shared by every gateway replica."""

    async def claim(self, key_id: str, nonce: str, ttl_s: int) -> bool:
        """True the first time (key_id, nonce) is seen within ttl_s; False for a replay.

        `key_id` is the replay scope: reach.gateway.auth passes the app id, because one request may carry
        signatures by several of an app's keys (rotation) and must be claimed once for all of them."""
        ...


@dataclass(frozen=True, slots=True)
class QuotaDecision:
    """Whether a request may enter; when not, which bucket was empty and when to come back."""

    allowed: bool
    retry_after_s: float = 0.0
    scope: Literal["app", "capability"] | None = None


class Quotas(Protocol):
    """Token buckets per app and per capability, shared by every gateway replica."""

    async def take(self, app: CallerApp, capability: str) -> QuotaDecision: ...


@dataclass(frozen=True, slots=True)
class Verified:
    """The signature is good: the request comes from this key's app."""

    entry: KeyEntry
    timestamp: int
    nonce: str | None


@dataclass(frozen=True, slots=True)
class AuthFailure:
    """Why a request was refused 401; `reason` is safe to show the caller (it never says which secret).

    `code` is one of AUTH_FAILURE_CODES, coarse enough to show too (an unknown key, a revoked key and a
    wrong signature are all `denied`); the HTTP service may use it as the error body's `error`."""

    reason: str
    code: str = "denied"


AUTH_FAILURE_CODES = ("missing", "malformed", "stale", "denied", "replay")


AuthOutcome = Verified | AuthFailure


class Authenticator(Protocol):
    """Checks `Reach-Key` + `Reach-Signature` over the raw body."""

    async def authenticate(self, *, key_id: str | None, signature: str | None, body: bytes,
                           now: int) -> AuthOutcome:
        """Raises InfraUnavailable while the keys it checks against may be stale (never admits then)."""
        ...

    def healthy(self) -> bool:
        """Whether the keys are current (the apps directory is still following its topic)."""
        ...

