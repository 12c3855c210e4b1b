"""uvicorn's httptools protocol with a cap on the request head: a head still arriving past the cap gets a 431.

httptools (llhttp, C) parses a request for a fraction of h11's CPU, but unlike h11 it buffers a head of any
size. This protocol counts the bytes of a head that has not completed yet and refuses it once they pass
`head_limit` (a slow, endless head; an endless header line); a large head that arrives whole in one read is
refused by the app's LimitHead middleware (reach.gateway.service), which sees the parsed headers."""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _refusal(limit: int) -> bytes:
    body = json.dumps({"error": "headers_too_large", "message": f"the request head passed {limit:,} bytes before "
                       "it ended", "hint": "send fewer or smaller headers"}).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)) + body


class HeadLimitedHttpTools(HttpToolsProtocol):
    """HttpToolsProtocol refusing a request head larger than `head_limit` bytes while it arrives."""

    head_limit = 16 * 1024  # set per server by `head_limited`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # of the head arriving now
        self._heads = 0  # heads completed on this connection
        self._in_body = False

    def data_received(self, data: bytes) -> None:
        heads, in_body = self._heads, self._in_body
        super().data_received(data)
        if heads != self._heads or in_body:
            # a head completed in this read, or it began inside a body: bytes here may be body bytes, so they
            # are not counted (a head is then counted from the next read on: at most one read too few)
            self._head_bytes = 0
            return
        if self._in_body or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.head_limit:
            if self.cycle is None or self.cycle.response_complete:
                self.transport.write(_refusal(self.head_limit))
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._heads += 1
        self._in_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()


def head_limited(limit: int) -> type[HeadLimitedHttpTools]:
    """The protocol class for one server, with its head limit."""
    return type("HeadLimitedHttpTools", (HeadLimitedHttpTools,), {"head_limit": limit})
