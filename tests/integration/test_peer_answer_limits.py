"""What a peer sends back is read up to a stated limit (issue 37, finding 4; decision 0060): a real HTTP server on
loopback streams a quarter of a gigabyte (no Content-Length, closed at the end) to the channel poster, to `reach a2a
bridge`'s client and to `reach mcp bridge`'s streamable HTTP client; each ends in a failure naming the limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface
from google.protobuf.json_format import MessageToJson
from pydantic import SecretStr

from reach.a2a.bridge import BridgeSettings, call, http_client, read_card
from reach.agent import BusinessError
from reach.agent.agent import Context
from reach.bodylimit import MARK
from reach.channels.provider import Failure, FailureKind, OutboundMessage
from reach.channels.settings import ChannelSettings
from reach.channels.webhook import WebhookProvider
from reach.envelopes import new_envelope
from reach.mcp.bridge import BridgeError, ToolSession, http_transport

FLOOD = 256 * 1024 * 1024  # far past every limit: read whole, it would be the process's memory
CHUNK = b"a" * (1024 * 1024)


class Flood:
    """A loopback server whose POST answers stream FLOOD bytes; GET /.well-known/agent-card.json is a small card."""

    def __init__(self) -> None:
        owner = self
        self.sent: list[int] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's names
                card = MessageToJson(owner.card).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(card)))
                self.end_headers()
                self.wfile.write(card)

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                written = 0
                try:
                    while written < FLOOD:
                        self.wfile.write(CHUNK)
                        written += len(CHUNK)
                except OSError:  # the reader stopped reading: what this test wants
                    pass
                owner.sent.append(written)

            def log_message(self, *_: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.card = AgentCard(name="flood", description="floods", version="1.0.0",
                              supported_interfaces=[AgentInterface(url=self.url, protocol_binding="JSONRPC",
                                                                   protocol_version="1.0")],
                              capabilities=AgentCapabilities(streaming=False), default_input_modes=["text/plain"],
                              default_output_modes=["application/json"])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="flood", daemon=True)


@pytest.fixture
def flood() -> Iterator[Flood]:
    server = Flood()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def test_a_receiver_streaming_a_huge_answer_is_a_permanent_failure_naming_the_limit(flood: Flood) -> None:
    settings = ChannelSettings(webhook_secret=SecretStr("s3cret"), webhook_allow_private=True)
    message = OutboundMessage(endpoint=flood.url + "hook", body={"status": "COMPLETED"}, message_id="m-flood",
                              trace_id="t1", tenant="acme")

    async def send() -> object:
        provider = WebhookProvider(settings)
        try:
            return await provider.send(message)
        finally:
            await provider.aclose()

    outcome = asyncio.run(send())
    assert isinstance(outcome, Failure), outcome
    assert (outcome.kind, outcome.code) == (FailureKind.PERMANENT, "ANSWER_TOO_LARGE") and MARK in outcome.reason


def test_a_remote_a2a_agent_streaming_a_huge_answer_fails_the_message_naming_the_limit(flood: Flood) -> None:
    settings = BridgeSettings()

    async def run() -> object:
        card = await read_card(flood.url, settings)
        http = http_client(flood.url, settings)
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        env = new_envelope("ext.flood", {"text": "hi"})
        ctx = Context(envelope=env, agent_id="agent://a2a/ext-flood", instance_id="i1", _cancelled=lambda: False)
        try:
            return await call(client, {"text": "hi"}, ctx, 0.0)
        finally:
            await client.close()
            await http.aclose()

    with pytest.raises(BusinessError) as raised:
        asyncio.run(run())
    assert raised.value.code == "A2A_ANSWER_TOO_LARGE" and MARK in str(raised.value)


def test_an_mcp_server_streaming_a_huge_answer_fails_the_bridges_start_naming_the_limit(flood: Flood) -> None:
    session = ToolSession(http_transport(flood.url))
    try:
        with pytest.raises(BridgeError) as raised:
            session.start(timeout_s=60)
    finally:
        session.close()
    assert MARK in str(raised.value)
