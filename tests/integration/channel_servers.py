"""Real local servers for the channel tests: a webhook receiver and a fake SMS provider (http.server threads)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar


@dataclass(frozen=True)
class Hit:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 (a free port) whose answers come from `answer(hit)`."""

    def __init__(self) -> None:
        self.hits: list[Hit] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                hit = Hit(self.command, self.path, {k: v for k, v in self.headers.items()}, self.rfile.read(length))
                owner.hits.append(hit)
                status, body = owner.answer(hit)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, *_: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="channel-test-server", daemon=True)

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Receiver(_Server):
    """A webhook receiver: 200 with an id for /hook, 404 for anything else."""

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        if hit.path == "/hook":
            return 200, {"id": f"rcv-{len(self.hits)}"}
        return 404, {"error": "no such hook"}

    def posts(self, path: str = "/hook") -> list[Hit]:
        return [h for h in list(self.hits) if h.method == "POST" and h.path == path]


class FakeSms(_Server):
    """The generic SMS API of reach/channels/sms.py; `mode` "ok" queues then reports delivered, "429" throttles."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"
        self.messages: dict[str, dict[str, Any]] = {}

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        if hit.method == "POST" and hit.path == "/api/messages":
            if self.mode == "429":
                return 429, {"error": "too many requests"}
            provider_id = f"sms-{uuid.uuid4().hex[:8]}"
            self.messages[provider_id] = json.loads(hit.body)
            return 200, {"id": provider_id, "status": "queued"}
        provider_id = hit.path.rsplit("/", 1)[-1]
        if hit.method == "GET" and provider_id in self.messages:
            return 200, {"id": provider_id, "status": "delivered"}
        return 404, {"error": "unknown message"}


S = TypeVar("S", bound=_Server)


@contextmanager
def listening(server: S) -> Iterator[S]:
    server.start()
    try:
        yield server
    finally:
        server.stop()
