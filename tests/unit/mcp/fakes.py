"""In-memory stand-ins for what the MCP SDK hands a handler: its context, session and connection."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeOutbound:
    """A connection's standalone channel: records the notifications sent; `broken` fails them."""

    sent: list[str] = field(default_factory=list)
    broken: bool = False

    async def notify(self, method: str, params: Any) -> None:
        if self.broken:
            raise ConnectionError("gone")
        self.sent.append(method)


@dataclass
class FakeConnection:
    outbound: FakeOutbound = field(default_factory=FakeOutbound)
    session_id: str | None = "s1"
    exit_stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


@dataclass
class FakeSession:
    _connection: FakeConnection
    client_capabilities: Any = None

    def check_client_capability(self, capability: Any) -> bool:
        return False  # declares neither elicitation nor an extension


@dataclass
class FakeContext:
    session: FakeSession
    protocol_version: str = "2025-11-25"
    request_id: int = 1
    method: str = "tools/call"


def context(connection: FakeConnection) -> Any:
    """A handler's context whose session holds `connection`."""
    return FakeContext(FakeSession(connection))
