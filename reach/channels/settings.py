"""ChannelSettings: each channel's provider configuration (env REACH_CHANNEL_*); one instance serves one.

| variable                           | default          | meaning                                                 |
|------------------------------------|------------------|---------------------------------------------------------|
| REACH_CHANNEL_TIMEOUT_S            | 10               | connect / read timeout of one provider call            |
| REACH_CHANNEL_WEBHOOK_SECRET       | (none: required) | operator secret each tenant's webhook secret derives from|
| REACH_CHANNEL_WEBHOOK_PREVIOUS_SECRET | (none)        | the one before, during a rotation (webhooks carry both) |
| REACH_CHANNEL_WEBHOOK_LEGACY_V1    | false            | also the old one-secret `v1=` (for one release)         |
| REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE| false            | allow webhooks to loopback/private/link-local targets   |
| REACH_CHANNEL_SMTP_HOST            | 127.0.0.1        | SMTP server                                             |
| REACH_CHANNEL_SMTP_PORT            | 25               | its port                                                |
| REACH_CHANNEL_SMTP_STARTTLS        | false            | upgrade the connection with STARTTLS before sending     |
| REACH_CHANNEL_SMTP_USERNAME        | (none)           | SMTP AUTH user (with the password)                      |
| REACH_CHANNEL_SMTP_PASSWORD        | (none)           | SMTP AUTH password (secret)                             |
| REACH_CHANNEL_SMTP_LOGIN_IN_CLEAR  | false            | allow AUTH without STARTTLS (a lab server only; refused |
|                                    |                  | at start otherwise)                                     |
| REACH_CHANNEL_SMTP_FROM            | reach@localhost  | the From address                                        |
| REACH_CHANNEL_SMS_URL              | (none: required) | base URL of the SMS provider's JSON API                 |
| REACH_CHANNEL_SMS_TOKEN            | (none)           | bearer token for it (secret)                            |
| REACH_CHANNEL_SMS_SENDER           | Reach            | the sender name / number sent with each message         |
| REACH_CHANNEL_SMS_DELIVERY_WAIT_S  | 5                | how long a send polls for the provider's delivery report|
| REACH_CHANNEL_SMS_POLL_S           | 0.2              | the poll interval                                       |
| REACH_CHANNEL_SMS_REPORTS          | poll             | `webhook`: the provider posts reports to the gateway; no poll|
| REACH_CHANNEL_IM_PROVIDER          | slack            | the IM payload (reach/channels/im.py PROVIDERS)         |
| REACH_CHANNEL_TICKET_PROVIDER      | json             | the ticket API (reach/channels/ticket.py PROVIDERS)     |

The IM and ticket channels sign and guard their POSTs as webhooks do: REACH_CHANNEL_WEBHOOK_SECRET (required),
its PREVIOUS_SECRET and LEGACY_V1, and REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE apply to them too.

ReportSettings (env REACH_REPORT_*), read by the gateway: each channel's provider signs the delivery reports it
posts to `POST /v1/reports/<channel>` with its own secret (reach/channels/reports.py); no secret: that route is off.

| variable                  | default | meaning                                                        |
|---------------------------|---------|----------------------------------------------------------------|
| REACH_REPORT_SMS_SECRET   | (none)  | the SMS provider's delivery reports (secret)                   |
| REACH_REPORT_IM_SECRET    | (none)  | the IM provider's read / acknowledgement reports (secret)      |
| REACH_REPORT_EMAIL_SECRET | (none)  | the bounce relay's DSNs (secret)                               |

ClosureSettings (env REACH_CALLBACK_*), read by the channel agents (which mint reply tokens) and the gateway
(which reads them at `POST /v1/callbacks/{token}`); both need the same secret:

| variable                          | default       | meaning                                                |
|-----------------------------------|---------------|--------------------------------------------------------|
| REACH_CALLBACK_SECRET             | (none)        | HMAC secret of reply tokens; none: no replies (secret) |
| REACH_CALLBACK_BASE_URL           | (none)        | the gateway's public URL; none: no replies             |
| REACH_CALLBACK_TTL_S              | 604800 (7 d)  | how long a reply token is accepted                     |
| REACH_CALLBACK_DEFAULT_CAPABILITY | (none)        | where a reply naming no capability goes (and no token) |
| REACH_CALLBACK_REPLY_CAPABILITIES | (none)        | comma-separated extra capabilities a reply may name    |
| REACH_CALLBACK_RATE               | 5             | replies per second per tenant (token bucket rate)     |
| REACH_CALLBACK_BURST              | 20            | the bucket's size                                      |
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.names import check_capability


class ChannelSettings(BaseSettings):
    """Provider configuration of the channel agents; tests pass their local servers' addresses."""

    model_config = SettingsConfigDict(env_prefix="REACH_CHANNEL_", frozen=True, extra="forbid")

    timeout_s: Annotated[float, Field(gt=0)] = 10.0
    webhook_secret: SecretStr | None = None
    webhook_previous_secret: SecretStr | None = None
    webhook_legacy_v1: bool = False  # the pre-issue-28 `v1=` (one secret for every tenant): for one release only
    webhook_allow_private: bool = False  # true only where receivers live on a private network (tests, on-prem)
    smtp_host: str = "127.0.0.1"
    smtp_port: Annotated[int, Field(gt=0, lt=65536)] = 25
    smtp_starttls: bool = False
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_login_in_clear: bool = False  # log in (username, password) without STARTTLS: a lab server's choice only
    smtp_from: str = "reach@localhost"
    sms_url: str | None = None
    sms_token: SecretStr | None = None
    sms_sender: str = "Reach"
    sms_delivery_wait_s: Annotated[float, Field(ge=0)] = 5.0
    sms_poll_s: Annotated[float, Field(gt=0)] = 0.2
    sms_reports: Literal["poll", "webhook"] = "poll"
    """How delivery is learnt: `poll` GETs the message's status after the send; `webhook` leaves it to the
    provider's report at the gateway (POST /v1/reports/sms), so the send is SENT only until the report comes."""
    im_provider: str = "slack"
    ticket_provider: str = "json"


class ReportSettings(BaseSettings):
    """The secrets providers sign their delivery reports with, one per channel (a leaked SMS secret forges no
    bounce); a channel without one takes no reports."""

    model_config = SettingsConfigDict(env_prefix="REACH_REPORT_", frozen=True, extra="forbid")

    sms_secret: SecretStr | None = None
    im_secret: SecretStr | None = None
    email_secret: SecretStr | None = None

    def key(self, channel: str) -> bytes | None:
        """The channel's report secret, or None when its reports are off."""
        value: SecretStr | None = getattr(self, f"{channel}_secret", None)
        text = value.get_secret_value() if value is not None else ""
        return text.encode() if text else None


class ClosureSettings(BaseSettings):
    """Reply tokens: without a secret and a base URL, outbound messages carry no reply address."""

    model_config = SettingsConfigDict(env_prefix="REACH_CALLBACK_", frozen=True, extra="forbid")

    secret: SecretStr | None = None
    base_url: str | None = None
    ttl_s: Annotated[int, Field(gt=0)] = 7 * 24 * 3600
    default_capability: str | None = None
    rate: Annotated[float, Field(gt=0)] = 5.0
    """Replies accepted per second per tenant at `POST /v1/callbacks/{token}` (the gateway's quota buckets, also
    held to the capability's own cap): the route is unsigned, so its tokens are metered by the tenant they name."""
    burst: Annotated[int, Field(gt=0)] = 20
    reply_capabilities: str = ""
    """Comma-separated capabilities a reply may name besides its message's own and the default: a reply token
    is a bearer credential held by whoever received the message, so it may not reach any capability it likes."""

    @field_validator("default_capability")
    @classmethod
    def _capability(cls, value: str | None) -> str | None:
        return check_capability(value) if value else None

    @field_validator("reply_capabilities")
    @classmethod
    def _capabilities(cls, value: str) -> str:
        for name in filter(None, (part.strip() for part in value.split(","))):
            check_capability(name)
        return value

    def reply_targets(self) -> frozenset[str]:
        """What a reply may name (REACH_CALLBACK_REPLY_CAPABILITIES and the default capability)."""
        named = {part.strip() for part in self.reply_capabilities.split(",") if part.strip()}
        return frozenset(named | ({self.default_capability} if self.default_capability else set()))

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"REACH_CALLBACK_BASE_URL {value[:200]!r} is not an http(s) URL; expected the "
                             "gateway's public URL, e.g. https://reach.example.com")
        return value or None

    def key(self) -> bytes | None:
        """The HMAC key, or None when replies are off (no secret)."""
        value = self.secret.get_secret_value() if self.secret is not None else ""
        return value.encode() if value else None
