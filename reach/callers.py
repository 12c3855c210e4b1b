"""Who calls the platform from outside: an app as the door sees it (CallerApp), a live key (KeyEntry), the directory
of live keys (AppDirectory), and why a caller is refused (AuthFailure). Shared by the gateway, A2A, the console and
request signing; it imports nothing of theirs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from reach.records import SpendLimit

CHANNEL_PREFIX = "channel."
GATEWAY_SOURCE = "gateway:"  # an envelope's `source` when a gateway app sent it: `gateway:<app_id>`


@dataclass(frozen=True, slots=True)
class CallerApp:
    """A calling application as the door sees it: who it is, what it may call, how fast."""

    app_id: str
    name: str
    tenant: str
    capabilities: tuple[str, ...]  # empty: every capability except channel.* (those only when listed)
    rate: float  # requests per second (token bucket rate)
    burst: int  # token bucket size
    limits: tuple[SpendLimit, ...] = ()  # spend limits per day / month (reach.core.spend, reach.gateway.budgets)

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


@dataclass(frozen=True, slots=True)
class AuthFailure:
    """Why a request was refused 401; `reason` is safe to show the caller (it never says which secret).

    `code` is one of AUTH_FAILURE_CODES, coarse enough to show too (an unknown key, a revoked key and a
    wrong signature are all `denied`); the HTTP service may use it as the error body's `error`."""

    reason: str
    code: str = "denied"


AUTH_FAILURE_CODES = ("missing", "malformed", "stale", "denied", "replay")
