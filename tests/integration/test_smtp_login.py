"""channel.email never sends SMTP credentials in clear unless the operator says so (issue 37, finding 12): a real
SMTP server on loopback (aiosmtpd) that accepts AUTH without TLS records what it was sent."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from pydantic import SecretStr

from reach.channels.errors import ChannelMisconfigured
from reach.channels.provider import OutboundMessage, Sent
from reach.channels.settings import ChannelSettings
from reach.channels.smtp import SmtpProvider

MESSAGE = OutboundMessage(endpoint="ops@example.com", body={"status": "COMPLETED"}, message_id="m-smtp",
                          trace_id="t1", subject="done")


class Recorder:
    """Accepts any login (recording its password) and any message."""

    def __init__(self) -> None:
        self.passwords: list[bytes] = []
        self.messages = 0

    def __call__(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        if isinstance(data, LoginPassword):
            self.passwords.append(data.password)
        return AuthResult(success=True)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages += 1
        return "250 OK"


@pytest.fixture
def server() -> Iterator[tuple[Recorder, int]]:
    recorder = Recorder()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    smtp = Controller(recorder, hostname="127.0.0.1", port=port, authenticator=recorder, auth_require_tls=False)
    smtp.start()
    yield recorder, port
    smtp.stop()


def test_a_login_without_starttls_is_refused_at_start_and_no_password_goes_out(server: tuple[Recorder, int]) -> None:
    recorder, port = server
    settings = ChannelSettings(smtp_port=port, smtp_username="reach", smtp_password=SecretStr("pw-in-clear"))
    with pytest.raises(ChannelMisconfigured, match="REACH_CHANNEL_SMTP_STARTTLS"):
        asyncio.run(SmtpProvider(settings).send(MESSAGE))
    assert recorder.passwords == [] and recorder.messages == 0


def test_the_operator_may_allow_a_clear_login_explicitly(server: tuple[Recorder, int]) -> None:
    recorder, port = server
    settings = ChannelSettings(smtp_port=port, smtp_username="reach", smtp_password=SecretStr("lab"),
                               smtp_login_in_clear=True)
    assert isinstance(asyncio.run(SmtpProvider(settings).send(MESSAGE)), Sent)
    assert recorder.passwords == [b"lab"] and recorder.messages == 1
    # without credentials nothing is sent in clear, so no TLS is needed
    assert isinstance(asyncio.run(SmtpProvider(ChannelSettings(smtp_port=port)).send(MESSAGE)), Sent)
