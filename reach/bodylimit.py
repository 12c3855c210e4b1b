"""Answers of peers read up to a stated limit: a receiver, a remote A2A agent or an MCP server that streams
gigabytes is a failure with a reason, never the memory of a shared process (decision 0060).

`bound(client, limit, what)` hangs two event hooks on an httpx AsyncClient (or an httpx2 one, the MCP SDK's): every
request asks for `Accept-Encoding: identity`, and every response has its stream wrapped so that reading it fails
with `AnswerTooLarge` when it declares a Content-Length over `limit`, when it is content-coded (a compressed body
would be counted before it is inflated), or at the byte past `limit`. The failure is raised while the body is read,
never from the hook, so a caller sees it where it sees a broken connection: for httpx it is a `ReadError`, for
httpx2 a `StreamError` (what the MCP SDK turns into the call's JSON-RPC error). For a server-sent event stream the
limit covers the whole stream.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import AsyncIterator
from typing import Any

RECEIVER_ANSWER_BYTES = 64 * 1024  # a webhook / IM / ticket / SMS answer: only its provider id is read
PEER_ANSWER_BYTES = 8 * 1024 * 1024  # a remote A2A agent's or an MCP server's answer (a task, a tool result)
MARK = "answers are read up to"  # in every AnswerTooLarge text: found again where a library passes on only the text


class AnswerTooLarge(Exception):
    """A peer's answer went past the limit it is read to (or was compressed, so that it could not be counted)."""


@functools.cache
def _kinds(library: str) -> tuple[type, type[AnswerTooLarge]]:
    """The library's AsyncByteStream, and AnswerTooLarge as the error of that library its callers expect."""
    module = importlib.import_module(library)
    base = module.ReadError if library == "httpx" else module.StreamError
    return module.AsyncByteStream, type("AnswerTooLarge", (AnswerTooLarge, base), {})


def _counted(stream: Any, *, limit: int, what: str, declared: str | None, coding: str, library: str) -> Any:
    base, error = _kinds(library)

    class Counted(base):  # type: ignore[misc,valid-type]
        async def __aiter__(self) -> AsyncIterator[bytes]:
            if coding not in ("", "identity"):
                raise error(f"the answer of {what} is {coding[:40]}-encoded although identity was asked for; a "
                            f"compressed answer cannot be counted before it is inflated ({MARK} a stated limit)")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise error(f"the answer of {what} declares {int(declared):,} bytes; answers are read up to "
                            f"{limit:,} bytes")
            seen = 0
            async for chunk in stream:
                seen += len(chunk)
                if seen > limit:
                    raise error(f"the answer of {what} goes past {limit:,} bytes; {MARK} {limit:,} bytes")
                yield chunk

        async def aclose(self) -> None:
            await stream.aclose()

    return Counted()


def bound(client: Any, limit: int, what: str) -> Any:
    """`client` (an httpx or httpx2 AsyncClient) with every answer read up to `limit` bytes; returns it."""
    library = type(client).__module__.split(".")[0]
    _kinds(library)

    async def identity(request: Any) -> None:
        request.headers["Accept-Encoding"] = "identity"

    async def counted(response: Any) -> None:
        response.stream = _counted(response.stream, limit=limit, what=what, library=library,
                                   declared=(response.headers.get("Content-Length") or "").strip() or None,
                                   coding=response.headers.get("Content-Encoding", "").strip().lower())

    client.event_hooks["request"].append(identity)
    client.event_hooks["response"].append(counted)
    return client
