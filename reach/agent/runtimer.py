"""The deadline of one running handler, moved by `ctx.heartbeat()` (reach.core.timeouts.RunClock decides it).

Thread-safe: a sync handler beats from its pool thread, an async one from the SDK's loop. An async run waits in
`asyncio.timeout`, which a beat reschedules; a sync run waits in `until_due`, which re-reads the deadline.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from reach.agent.exceptions import LeaseLost
from reach.core.timeouts import RunClock
from reach.envelopes import now_ms
from reach.records import ErrorInfo


class RunTimer:
    """One run's clock; `beat()` extends it until `end(why)`, after which a beat raises LeaseLost(why)."""

    def __init__(self, clock: RunClock, *, message_id: str) -> None:
        self._clock = clock
        self._message_id = message_id
        self._lock = threading.Lock()
        self._ended: str | None = None
        self._loop = asyncio.get_running_loop()
        self._timeout: asyncio.Timeout | None = None

    @property
    def clock(self) -> RunClock:
        with self._lock:
            return self._clock

    def remaining_s(self) -> float:
        return (self.clock.due_at - now_ms()) / 1000

    def watch(self, timeout: asyncio.Timeout) -> None:
        """Reschedule this `asyncio.timeout` on every beat (async handlers)."""
        self._timeout = timeout

    def beat(self) -> None:
        with self._lock:
            if self._ended is not None:
                raise LeaseLost(f"ctx.heartbeat() for {self._message_id}, but {self._ended}; stop this run (nothing "
                                "it returns now is published).")
            self._clock = self._clock.beat(now_ms())
        if self._timeout is not None:
            try:
                same_loop = asyncio.get_running_loop() is self._loop
            except RuntimeError:
                same_loop = False
            if same_loop:
                self._reschedule()
            else:
                self._loop.call_soon_threadsafe(self._reschedule)

    def end(self, why: str) -> None:
        """No beat extends this run any more (it ended, or its lease went to another run)."""
        with self._lock:
            if self._ended is None:
                self._ended = why

    def _reschedule(self) -> None:
        timeout = self._timeout
        if timeout is not None and not timeout.expired():
            timeout.reschedule(self._loop.time() + max(self.remaining_s(), 0.0))

    def timed_out(self) -> bool:
        """True when the run was cut by this timer (a few ms of slack: the loop's clock is not the wall clock)."""
        if self._timeout is not None and self._timeout.expired():
            return True
        return now_ms() + 10 >= self.clock.due_at

    def error(self) -> ErrorInfo:
        """Why the run was cut: a heartbeat timeout once it has beaten, else its execution timeout."""
        clock = self.clock
        if clock.by_heartbeat and clock.due_at == clock.limit_at:
            return ErrorInfo(kind="TIMEOUT", code="EXECUTION_TIMEOUT", message=(
                f"the run reached the longest its heartbeats may extend it ({clock.limit_at - clock.started_ms} ms: "
                "the POLICY cap, else the message's deadline)"))
        if clock.by_heartbeat:
            return ErrorInfo(kind="TIMEOUT", code="HEARTBEAT_TIMEOUT", message=(
                f"no ctx.heartbeat() within {clock.heartbeat_ms} ms (heartbeat_timeout_ms) after the last one"))
        return ErrorInfo(kind="TIMEOUT", code="EXECUTION_TIMEOUT",
                         message=f"the run took longer than its execution timeout of {clock.timeout_ms} ms")


async def until_due(thread: Future[Any], timer: RunTimer) -> Any:
    """The sync handler's result, or TimeoutError once the timer is past due (the thread keeps running)."""
    waiting = asyncio.wrap_future(thread)
    while True:
        remaining = timer.remaining_s()
        if remaining <= 0:
            raise TimeoutError("past the run's deadline")
        done, _ = await asyncio.wait({waiting}, timeout=remaining)
        if done:
            return waiting.result()
