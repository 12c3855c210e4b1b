"""The one list of channels: name, endpoint check, provider factory. A new adapter is a module plus a row here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reach.channels import guard, im, sms, smtp, ticket, webhook
from reach.channels.errors import BadCallback
from reach.channels.provider import Provider
from reach.channels.settings import ChannelSettings

CAPABILITY_PREFIX = "channel."
CAPABILITY_VERSION = "1.0.0"


def provider_destination(_endpoint: str) -> str:
    """Every send of the channel goes through the operator's provider: one destination."""
    return ""


@dataclass(frozen=True)
class Channel:
    """One channel kind: its capability `channel.<name>`, how its endpoints look, how to build its provider."""

    name: str
    check_endpoint: Callable[[str], str]
    provider: Callable[[ChannelSettings], Provider]
    summary: str
    destination: Callable[[str], str] = provider_destination
    """The endpoint's destination for channel health (reach/channels/health.py): a webhook's host, whose
    failures are the receiver's; "" for a channel whose failures are its provider's (email, SMS)."""

    @property
    def caller_chosen(self) -> bool:
        """Whether the caller chooses where a send goes (its failures are then the destination's, not the
        instance's: reach/channels/agent.py)."""
        return self.destination is not provider_destination

    @property
    def capability(self) -> str:
        return CAPABILITY_PREFIX + self.name

    @property
    def agent_id(self) -> str:
        return f"agent://channels/{self.name}"


CHANNELS: tuple[Channel, ...] = (
    Channel("webhook", webhook.check_endpoint, webhook.WebhookProvider, "signed HTTP POST (httpx)",
            guard.destination),
    Channel("im", im.check_endpoint, im.ImProvider, "chat message through an incoming webhook (Slack payload)",
            guard.destination),
    Channel("ticket", ticket.check_endpoint, ticket.TicketProvider, "ticket through a REST API (generic JSON)",
            guard.destination),
    Channel("email", smtp.check_endpoint, smtp.SmtpProvider, "SMTP (STARTTLS / AUTH from settings)"),
    Channel("sms", sms.check_endpoint, sms.SmsProvider, "generic JSON SMS provider API"),
)
BY_NAME = {c.name: c for c in CHANNELS}


def channel(name: str) -> Channel:
    """The channel called `name`, or BadCallback naming the ones there are."""
    found = BY_NAME.get(name)
    if found is None:
        raise BadCallback(f"unknown channel {name[:40]!r}; expected one of {', '.join(BY_NAME)}.")
    return found
