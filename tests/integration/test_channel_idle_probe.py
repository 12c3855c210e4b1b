"""channel.email's idle probe against a real SMTP server on loopback (aiosmtpd): a provider that goes down while
no message is sent is known OPEN within two idle probes, and one that comes back closes again after its probes,
with no message sent either way."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiosmtpd.controller import Controller

from reach.channels.agent import ChannelService, IdleProber
from reach.channels.catalog import channel
from reach.channels.health import ChannelRules, ChannelState
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.channels.smtp import SmtpProvider


class Counting:
    """Counts the messages the server accepted (an idle probe must send none)."""

    def __init__(self) -> None:
        self.messages = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages += 1
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _until(service: ChannelService, state: ChannelState, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if service.health.state(service.clock()) is state:
            return True
        await asyncio.sleep(0.05)
    return False


def test_an_smtp_server_down_while_idle_opens_the_channel_and_its_return_closes_it() -> None:
    port, handler = _free_port(), Counting()
    servers = [Controller(handler, hostname="127.0.0.1", port=port)]
    servers[0].start()
    rules = ChannelRules(idle_probe_every_ms=200, idle_probe_failures=2, open_ms=300, probe_every_ms=200, probes=2)
    service = ChannelService(channel("email"), SmtpProvider(ChannelSettings(smtp_port=port, timeout_s=2)),
                             health=rules, closure=ClosureSettings())

    async def scenario() -> None:
        prober = IdleProber(service)
        await prober.start()
        try:
            await asyncio.sleep(0.5)  # a few idle probes pass against the running server
            assert service.health.state(service.clock()) is ChannelState.HEALTHY
            servers.pop().stop()
            assert await _until(service, ChannelState.OPEN, 10), "still not OPEN 10 s after the server stopped"
            assert "idle probes failed" in (service.health.breaker.reason or "")
            assert service.destinations.open(service.clock()) == ["*/"]
            servers.append(Controller(handler, hostname="127.0.0.1", port=port))
            servers[0].start()
            assert await _until(service, ChannelState.HEALTHY, 10), "still OPEN 10 s after the server came back"
        finally:
            await prober.stop()

    try:
        asyncio.run(scenario())
    finally:
        for server in servers:
            server.stop()
    assert handler.messages == 0, "an idle probe sent a message"
