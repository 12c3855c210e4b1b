"""What the status fold needs from the channels and the control topic, as ports: the fold never imports
`reach.channels`, and holds no control view of its own.

A row whose request asked for a callback gets its callback envelope (or a rejection receipt) when it ends; the
channels package knows how (`reach.channels.closure.ChannelCallbacks`), the stream app's wiring passes it in.
`NoCallbacks` is the port of a fold that sends none (tools that fold receipts only to read them). The fold asks
`settle` only about rows with a callback spec (or fallback or fan-out bookkeeping): a row without one, the common
case, has no callback to settle.

An agent's ending that its capability's POLICY `fallback` serves is sent to the fallback by the fold
(reach.core.fallback, docs/decisions/0034): `Fallbacks` says which capability that is and reads the envelope the
agent was handed (`reach.streams.status.fallbacks.PolicyFallbacks`); `NoFallbacks` sends none.
"""
from __future__ import annotations

from typing import Protocol

from reach.core.lifecycle import StatusRow
from reach.records import Envelope, Receipt


class Callbacks(Protocol):
    def settle(self, row: StatusRow, receipt: Receipt, *, now: int) -> tuple[StatusRow, Envelope | Receipt | None]:
        """The row with its callback bookkeeping, and the callback envelope (or rejection receipt) to produce."""
        ...

    def unroutable(self, callback: Envelope, *, now: int, topic: str) -> Receipt:
        """The terminal receipt of a callback whose channel has no topic."""
        ...


class NoCallbacks:
    def settle(self, row: StatusRow, receipt: Receipt, *, now: int) -> tuple[StatusRow, Envelope | Receipt | None]:
        return row, None

    def unroutable(self, callback: Envelope, *, now: int, topic: str) -> Receipt:
        raise AssertionError("a fold without callbacks produced a callback")


class Fallbacks(Protocol):
    def fallback_of(self, capability: str) -> str | None:
        """The capability's POLICY fallback (None: none)."""
        ...

    def envelope(self, at: tuple[str, int, int]) -> bytes | None:
        """The envelope record at (topic, partition, offset); None when it can never be read (retention, a
        tombstone). Raises StreamsError when it cannot be read now (the fold reads its batch again)."""
        ...


class NoFallbacks:
    def fallback_of(self, capability: str) -> str | None:
        return None

    def envelope(self, at: tuple[str, int, int]) -> bytes | None:
        raise AssertionError("a fold without fallbacks asked for an envelope")
