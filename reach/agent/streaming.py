"""A running handler's progress stream: ctx.progress / ctx.emit to coalesced PROGRESS receipts.

The pure `reach.core.progress.Coalescer` decides what goes in the next receipt; this shell publishes one when
the interval allows (right away, or from a timer for what a handler left pending), makes `emit` wait when
the pending chunks reach their bound (back-pressure instead of an unbounded buffer), and `close` flushes the
rest before the handler's outcome receipt is produced, so the last chunk always comes before COMPLETED on
the message's receipts partition. A PROGRESS receipt the broker refuses is logged, never the handler's
failure: progress is advisory, the outcome receipt is the record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from reach.core.progress import Coalescer
from reach.envelopes import now_ms
from reach.kafka.types import Message
from reach.receipts import receipt_for
from reach.records import Envelope, Receipt, Status

log = logging.getLogger("reach.agent")
Send = Callable[[Receipt], "Future[Message]"]


class ProgressStream:
    """One attempt's progress; used from the handler's event loop (async handlers)."""

    def __init__(self, envelope: Envelope, *, send: Send, agent_id: str, instance_id: str,
                 coalescer: Coalescer | None = None, clock: Callable[[], int] = now_ms) -> None:
        self._envelope = envelope
        self._send = send
        self._agent_id = agent_id
        self._instance_id = instance_id
        self._coalescer = coalescer or Coalescer(replace_first=envelope.attempt > 1)
        self._clock = clock  # ms; the interval checks and each receipt's `at` read this one clock
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.published = 0

    async def progress(self, fraction: float | None, note: str | None = None) -> None:
        self._coalescer.progress(fraction, note)
        await self._pump()

    async def emit(self, chunk: Any, *, append: bool = True) -> None:
        self._coalescer.emit(chunk, append=append)
        await self._pump()

    def close(self) -> None:
        """Publish what is pending now (before the outcome receipt); later calls change nothing."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._closed:
            self._publish(final=True)
        self._closed = True

    async def _pump(self) -> None:
        if self._closed:
            return
        wait_ms = self._coalescer.due_at() - self._clock()
        if wait_ms > 0 and self._coalescer.full:
            await asyncio.sleep(wait_ms / 1000)  # back-pressure: a chatty handler waits for the next receipt
            self._publish()
        elif self._timer is None:
            self._publish()  # now when due, else it arms the timer for when it is

    def _due(self) -> None:
        self._timer = None
        if not self._closed:
            self._publish()

    def _publish(self, *, final: bool = False) -> None:
        """Take and send the next PROGRESS receipt once it is due (the last one, before the outcome, at once).
        Every path checks the interval here: a timer armed before a back-pressure wait used to fire right after
        the receipt that wait sent, two receipts a few ms apart."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._clock()
        wait_ms = self._coalescer.due_at() - now
        if wait_ms > 0 and not final:
            self._timer = asyncio.get_running_loop().call_later(wait_ms / 1000, self._due)
            return
        progress = self._coalescer.take(now)
        if progress is None:
            return
        # the receipt says when it was taken: two receipts' `at` are never closer than the interval, however
        # late a loaded machine gets from the take to the send
        receipt = receipt_for(self._envelope, Status.PROGRESS, agent_id=self._agent_id,
                              instance_id=self._instance_id, progress=progress, at=now)
        try:
            self._send(receipt).add_done_callback(self._acked)
        except Exception as exc:  # noqa: BLE001 - progress is advisory; the outcome receipt is the record
            log.warning("a PROGRESS receipt of %s was not queued (%s)", self._envelope.message_id, exc)
            return
        self.published += 1

    def _acked(self, future: Future[Message]) -> None:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            log.warning("a PROGRESS receipt of %s was refused (%s)", self._envelope.message_id, error)
