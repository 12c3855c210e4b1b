"""What the router needs from intent routing, as a port: the router never imports `reach.intent`.

When no instance can take a request and the capability's policy asks for a human, the router hands the request
off instead of answering UNROUTABLE; `reach.intent.unroutable.IntentHandoff` builds the handoff record and its
receipt, the stream app's wiring passes it in. `NoHandoff` is the port of a router that has none (every such request
is then UNROUTABLE).
"""
from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Protocol

from reach.kafka import headers as H
from reach.names import Names
from reach.records import AgentRegistration

Record = tuple[str, bytes, bytes, H.Headers]  # topic, key, value, headers


class Handoff(Protocol):
    enabled: bool  # False: the router answers UNROUTABLE even when a policy asks for a handoff

    def outputs(self, envelope: dict[str, Any], raw: bytes, registrations: Iterable[AgentRegistration], *, why: str,
                disabled: Collection[str], names: Names, at: int) -> list[Record]:
        """The records that hand the envelope to a human (produced with the batch, committed after their acks)."""
        ...


class NoHandoff:
    enabled = False

    def outputs(self, envelope: dict[str, Any], raw: bytes, registrations: Iterable[AgentRegistration], *, why: str,
                disabled: Collection[str], names: Names, at: int) -> list[Record]:
        return []
