"""ChannelSettings: each channel's provider configuration (env REACH_CHANNEL_*); one instance serves one.

| variable                           | default          | meaning                                                 |
|------------------------------------|------------------|---------------------------------------------------------|
| REACH_CHANNEL_TIMEOUT_S            | 10               | connect / read timeout of one provider call            |
| REACH_CHANNEL_WEBHOOK_SECRET       | (none: required) | HMAC secret of the `Reach-Signature` header on webhooks |
| REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE| false            | allow webhooks to loopback/private/link-local targets   |
| REACH_CHANNEL_SMTP_HOST            | 127.0.0.1        | SMTP server                                             |
| REACH_CHANNEL_SMTP_PORT            | 25               | its port                                                |
| REACH_CHANNEL_SMTP_STARTTLS        | false            | upgrade the connection with STARTTLS before sending     |
| REACH_CHANNEL_SMTP_USERNAME        | (none)           | SMTP AUTH user (with the password)                      |
| REACH_CHANNEL_SMTP_PASSWORD        | (none)           | SMTP AUTH password (secret)                             |
| REACH_CHANNEL_SMTP_FROM            | reach@localhost  | the From address                                        |
| REACH_CHANNEL_SMS_URL              | (none: required) | base URL of the SMS provider's JSON API                 |
| REACH_CHANNEL_SMS_TOKEN            | (none)           | bearer token for it (secret)                            |
| REACH_CHANNEL_SMS_SENDER           | Reach            | the sender name / number sent with each message         |
| REACH_CHANNEL_SMS_DELIVERY_WAIT_S  | 5                | how long a send polls for the provider's delivery report|
| REACH_CHANNEL_SMS_POLL_S           | 0.2              | the poll interval                                       |
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ChannelSettings(BaseSettings):
    """Provider configuration of the channel agents; tests pass their local servers' addresses."""

    model_config = SettingsConfigDict(env_prefix="REACH_CHANNEL_", frozen=True, extra="forbid")

    timeout_s: Annotated[float, Field(gt=0)] = 10.0
    webhook_secret: SecretStr | None = None
    webhook_allow_private: bool = False  # true only where receivers live on a private network (tests, on-prem)
    smtp_host: str = "127.0.0.1"
    smtp_port: Annotated[int, Field(gt=0, lt=65536)] = 25
    smtp_starttls: bool = False
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_from: str = "reach@localhost"
    sms_url: str | None = None
    sms_token: SecretStr | None = None
    sms_sender: str = "Reach"
    sms_delivery_wait_s: Annotated[float, Field(ge=0)] = 5.0
    sms_poll_s: Annotated[float, Field(gt=0)] = 0.2
