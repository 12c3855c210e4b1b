"""The Provider protocol of channel adapters, and their outcomes as values: Sent, or a classified Failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """One send: where to (the channel's endpoint: a URL, an address, a number) and what (a JSON body)."""

    endpoint: str
    body: dict[str, Any]
    message_id: str
    trace_id: str
    subject: str = ""
    reply_url: str = ""  # where a reply joins the trace (POST, reach/channels/tokens.py); "" when replies are off
    tenant: str = ""  # whose message it is: webhooks are signed with the tenant's secret (reach/channels/webhooksig.py)
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers a webhook carries (reach.channels.poster.EXTRA)


@dataclass(frozen=True, slots=True)
class Sent:
    """The provider accepted the send; `delivered` when its answer already confirms delivery."""

    provider_message_id: str
    delivered: bool = False
    reported_later: bool = False
    """The provider reports delivery to the gateway (POST /v1/reports/<channel>), not to this instance: the
    instance neither polls nor counts a missing report against the channel's health."""


class FailureKind(StrEnum):
    """How a failed send is retried."""

    RETRYABLE = "retryable"  # timeout, 5xx, connection refused: another attempt may pass
    RATE_LIMITED = "rate_limited"  # 429: retryable, and an OVERLOAD-class failure for the instance's breaker
    PERMANENT = "permanent"  # a 4xx other than 429, a refused recipient: never retried


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a send failed, with a stable code and a reason a person can act on."""

    kind: FailureKind
    code: str
    reason: str
    retry_after_s: float | None = field(default=None)


SendOutcome = Sent | Failure


class Provider(Protocol):
    """A channel adapter: one provider configuration, one `send` (never raising for a provider's answer)."""

    channel: str

    async def send(self, message: OutboundMessage) -> SendOutcome: ...

    async def delivered(self, sent: Sent) -> bool:
        """Whether the provider has confirmed delivery of an accepted send (a poll; adapters that learn it
        from the send's answer return `sent.delivered`)."""
        ...

    async def aclose(self) -> None: ...


class Probeable(Protocol):
    """A provider that can be checked without sending a message (an idle probe: reach/channels/health.py)."""

    async def probe(self) -> Failure | None:
        """None when the provider answers as it should, else why not (never raising)."""
        ...


def probeable(provider: Provider) -> Probeable | None:
    """The provider as a Probeable, or None when it has no way to be checked without a message (webhooks go
    where callers point them; the HTTP providers' APIs have no call without an effect)."""
    return provider if callable(getattr(provider, "probe", None)) else None  # type: ignore[return-value]


def classify_status(status: int, *, retry_after: str | None = None) -> Failure | None:
    """The failure an HTTP status means (None for 2xx): 429 rate-limited, 408/5xx retryable, other 4xx permanent.

    The target's answer body is never quoted: a receipt's error would hand it to the caller who chose the
    endpoint, turning the channel into a way to read internal services."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return Failure(FailureKind.RATE_LIMITED, "RATE_LIMITED", "the provider answered 429 Too Many Requests",
                       retry_after_s=_seconds(retry_after))
    if status == 408 or status >= 500:
        return Failure(FailureKind.RETRYABLE, f"HTTP_{status}", f"the provider answered {status}; retrying",
                       retry_after_s=_seconds(retry_after))
    return Failure(FailureKind.PERMANENT, f"HTTP_{status}", f"the provider refused the send with {status}; "
                   "check the endpoint and the channel's credentials (not retried)")


def _seconds(value: str | None) -> float | None:
    """A Retry-After header in seconds (the HTTP-date form is not used by the providers we talk to)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if 0 <= seconds <= 3600 else None
