"""channel.email: the body as a plain-text email over SMTP (stdlib smtplib in a thread; STARTTLS and AUTH
from settings). The server's acceptance is SENT and DELIVERED: SMTP tells nothing after it."""

from __future__ import annotations

import asyncio
import json
import re
import smtplib
import ssl
from email.message import EmailMessage

from reach.channels.errors import BadCallback, ChannelMisconfigured
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent
from reach.channels.settings import ChannelSettings

_ADDRESS = re.compile(r"[^@\s<>,;]{1,64}@[A-Za-z0-9.-]{1,253}")


def check_endpoint(endpoint: str) -> str:
    """One plain address, e.g. ops@example.com (no display name, no list)."""
    if not _ADDRESS.fullmatch(endpoint):
        raise BadCallback(f"email endpoint {endpoint[:200]!r} is not one address; expected e.g. ops@example.com.")
    return endpoint


def compose(message: OutboundMessage, sender: str) -> EmailMessage:
    """The email: Message-ID from the Reach message id (the same on a retry), the body as indented JSON."""
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = message.endpoint
    mail["Subject"] = message.subject or f"Reach message {message.message_id}"
    mail["Message-ID"] = provider_id(message)
    mail["Reach-Trace-Id"] = message.trace_id
    if message.reply_url:
        mail["Reach-Reply-To"] = message.reply_url
    mail.set_content(json.dumps(message.body, indent=2, sort_keys=True) + "\n")
    return mail


def provider_id(message: OutboundMessage) -> str:
    return f"<{message.message_id}@reach>"


def classify_smtp(exc: Exception) -> Failure:
    """A 4xx SMTP reply or a broken connection is retryable; 5xx and failed AUTH are permanent."""
    code: int | None = None
    if isinstance(exc, smtplib.SMTPRecipientsRefused) and exc.recipients:
        code = next(iter(exc.recipients.values()))[0]
    elif isinstance(exc, (smtplib.SMTPResponseException)):
        code = exc.smtp_code
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return Failure(FailureKind.PERMANENT, "SMTP_AUTH_FAILED", f"the SMTP server refused the login ({exc}); "
                       "check REACH_CHANNEL_SMTP_USERNAME / REACH_CHANNEL_SMTP_PASSWORD")
    if code is not None and 500 <= code < 600:
        return Failure(FailureKind.PERMANENT, f"SMTP_{code}", f"the SMTP server refused the message: {exc}"[:500])
    if code == 421 or code == 450 or code == 451 or code == 452:
        return Failure(FailureKind.RETRYABLE, f"SMTP_{code}", f"the SMTP server deferred the message: {exc}"[:500])
    return Failure(FailureKind.RETRYABLE, "SMTP_UNAVAILABLE", f"{type(exc).__name__}: {exc}"[:500])


class SmtpProvider:
    """One connection per send (SMTP sessions are cheap and servers drop idle ones)."""

    channel = "email"

    def __init__(self, settings: ChannelSettings) -> None:
        if settings.smtp_username and not settings.smtp_starttls and not settings.smtp_login_in_clear:
            raise ChannelMisconfigured(
                "channel.email has REACH_CHANNEL_SMTP_USERNAME without REACH_CHANNEL_SMTP_STARTTLS=true: its login "
                "would send the password in clear. Turn STARTTLS on (the server must offer it), or, for a lab "
                "server on a trusted network only, set REACH_CHANNEL_SMTP_LOGIN_IN_CLEAR=true.")
        self._settings = settings

    async def send(self, message: OutboundMessage) -> SendOutcome:
        mail = compose(message, self._settings.smtp_from)
        try:
            await asyncio.to_thread(self._deliver, mail)
        except (smtplib.SMTPException, OSError) as exc:  # OSError: refused, reset, timed out, TLS
            return classify_smtp(exc)
        return Sent(provider_message_id=provider_id(message), delivered=True)

    def _deliver(self, mail: EmailMessage) -> None:
        s = self._settings
        with smtplib.SMTP(s.smtp_host, s.smtp_port, timeout=s.timeout_s) as session:
            if s.smtp_starttls:
                session.starttls(context=ssl.create_default_context())
            if s.smtp_username and s.smtp_password is not None:
                session.login(s.smtp_username, s.smtp_password.get_secret_value())
            session.send_message(mail)

    async def probe(self) -> Failure | None:
        """The idle probe: connect, EHLO (and STARTTLS when configured), NOOP, QUIT; no message, no login."""
        try:
            await asyncio.to_thread(self._noop)
        except (smtplib.SMTPException, OSError) as exc:
            return classify_smtp(exc)
        return None

    def _noop(self) -> None:
        s = self._settings
        with smtplib.SMTP(s.smtp_host, s.smtp_port, timeout=s.timeout_s) as session:
            if s.smtp_starttls:
                session.starttls(context=ssl.create_default_context())
            code, answer = session.noop()
            if code != 250:
                raise smtplib.SMTPResponseException(code, answer)

    async def delivered(self, sent: Sent) -> bool:
        return sent.delivered

    async def aclose(self) -> None:
        return None
