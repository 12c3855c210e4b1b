"""The head cap of the gateway's HTTP protocol: a head still arriving past the limit gets a 431 and the connection
closes; bodies and many small requests on one keep-alive connection are never counted as a head."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from reach.gateway.httpproto import head_limited

LIMIT = 1024


class Transport:
    """What the protocol writes, and whether it closed the connection."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def _echo_length(scope: Any, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(str(len(
        body))))]})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


async def _feed(chunks: list[bytes]) -> Transport:
    config = uvicorn.Config(_echo_length, http=head_limited(LIMIT), lifespan="off", log_level="critical")
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={},  # type: ignore[call-arg]
                                          _loop=asyncio.get_running_loop())
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    for chunk in chunks:
        protocol.data_received(chunk)
        for _ in range(5):  # let the app's task run
            await asyncio.sleep(0)
    return transport


def test_a_slow_endless_head_gets_a_431_once_it_passes_the_limit() -> None:
    lines = [b"POST /v1/envelopes HTTP/1.1\r\nHost: gw\r\n"] + [b"X-Slow-%d: %s\r\n" % (i, b"a" * 100)
                                                             for i in range(20)]
    transport = asyncio.run(_feed(lines))
    assert transport.written.startswith(b"HTTP/1.1 431 ") and b'"headers_too_large"' in transport.written
    assert transport.closed


def test_an_endless_header_line_is_cut_too() -> None:
    transport = asyncio.run(_feed([b"GET / HTTP/1.1\r\nX-Long: "] + [b"b" * 512] * 4))
    assert transport.written.startswith(b"HTTP/1.1 431 ") and transport.closed


def test_a_body_larger_than_the_head_limit_is_read_whole() -> None:
    body = b"x" * (LIMIT * 8)
    head = b"POST /v1/envelopes HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n" % len(body)
    transport = asyncio.run(_feed([head + body[:100], *(body[i:i + 700] for i in range(100, len(body), 700))]))
    assert transport.written.startswith(b"HTTP/1.1 200 ") and transport.written.endswith(str(len(body)).encode())
    assert not transport.closed


def test_many_small_requests_on_one_connection_are_each_counted_alone() -> None:
    request = b"GET / HTTP/1.1\r\nHost: gw\r\nX-Pad: " + b"p" * 300 + b"\r\n\r\n"
    transport = asyncio.run(_feed([request] * 20))
    assert transport.written.count(b"HTTP/1.1 200 ") == 20 and b"431" not in transport.written
    assert not transport.closed
