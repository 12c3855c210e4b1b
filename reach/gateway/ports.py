"""The seams between the gateway's HTTP service and what it depends on (apps, nonces, quotas); who calls (CallerApp,
KeyEntry, AppDirectory, AuthFailure) is reach.callers, shared with A2A and the console.

The HTTP service (reach.gateway.service) sees only these protocols; the Kafka- and Redis-backed
implementations and the in-memory fakes for unit tests both satisfy them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from reach.callers import AuthFailure, CallerApp, KeyEntry
from reach.signing import Signature


class NonceStore(Protocol):
    """Nonces seen within the replay window, shared by every gateway replica."""

    async def claim(self, key_id: str, nonce: str, ttl_s: int) -> bool:
        """True the first time (key_id, nonce) is seen within ttl_s; False for a replay.

        `key_id` is the replay scope: reach.gateway.auth passes the app id, because one request may carry
        signatures by several of an app's keys (rotation) and must be claimed once for all of them."""
        ...

    async def release(self, key_id: str, nonce: str) -> None:
        """Forget a claimed nonce: its request was refused after the signature check (quota, permission, ...),
        so it holds no memory for the rest of the window; a replay is then refused like the original."""
        ...


@dataclass(frozen=True, slots=True)
class QuotaDecision:
    """Whether a request may enter; when not, which bucket was empty and when to come back."""

    allowed: bool
    retry_after_s: float = 0.0
    scope: Literal["app", "capability", "read"] | None = None


class Quotas(Protocol):
    """Token buckets per app and per capability, shared by every gateway replica."""

    async def take(self, app: CallerApp, capability: str) -> QuotaDecision: ...

    async def take_read(self, app: CallerApp, cost: int = 1) -> QuotaDecision:
        """`cost` tokens (at most the burst) of the app's read bucket (status and trace reads, event streams, A2A get
        / subscribe, MCP sessions and tool lists), apart from its request bucket: reads never use up the quota of
        sends."""
        ...


@dataclass(frozen=True, slots=True)
class Verified:
    """The signature is good: the request comes from this key's app."""

    entry: KeyEntry
    timestamp: int
    nonce: str | None


AuthOutcome = Verified | AuthFailure


class Authenticator(Protocol):
    """Checks `Reach-Key` + `Reach-Signature` over the method, the request target and the raw body."""

    def screen(self, *, key_id: str | None, signature: str | None, now: int) -> Signature | AuthFailure:
        """The checks that need no body (headers present, well formed, nonce, scheme, time window): called
        before the body is read, so an unsigned or malformed request costs no body read."""
        ...

    async def authenticate(self, *, key_id: str | None, signature: str | None, method: str, target: str,
                           body: bytes, now: int) -> AuthOutcome:
        """`target` is the path and query as sent (reach.signing.request_target). Raises InfraUnavailable while
        the keys it checks against may be stale (never admits then)."""
        ...

    def healthy(self) -> bool:
        """Whether the keys are current (the apps directory is still following its topic)."""
        ...

    async def release(self, verified: Verified) -> None:
        """Give back the nonce of a verified request the door then refused (NonceStore.release)."""
        ...

