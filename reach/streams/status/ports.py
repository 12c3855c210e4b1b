"""What the status fold needs from the channels, as a port: the fold never imports `reach.channels`.

A row whose request asked for a callback gets its callback envelope (or a rejection receipt) when it ends; the
channels package knows how (`reach.channels.closure.ChannelCallbacks`), the stream app's wiring passes it in.
`NoCallbacks` is the port of a fold that sends none (tools that fold receipts only to read them).
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
