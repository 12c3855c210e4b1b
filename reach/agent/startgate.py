"""When a run's STARTED receipt goes out: not at all for a run that ends within the grace, else when the grace ends.

A handler that returns within `grace_s` (the default 50 ms) ends with its terminal receipt alone, which carries
the start time in its `timings` under `started_at` (epoch ms): one record fewer per request for the broker and for
every consumer of the receipts. A run still going when the grace ends sends STARTED then, so the timekeeper's
delivery timeout (ROUTED -> STARTED) sees it at most `grace_s` later than when STARTED went out first. STARTED is
sent before anything else the run publishes (a PROGRESS receipt, a non-terminal outcome), so the receipts of a run
keep their order. docs/decisions/0056-agent-batch-path.md."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

STARTED_AT = "started_at"
"""The terminal receipt's `timings` key for the start time of a run whose STARTED was skipped (epoch ms)."""
DEFAULT_GRACE_MS = 50


class Graces:
    """The grace timers of one SDK loop: one loop timer for them all, not one per run.

    Every run's grace is the same length, so their deadlines come in the order the runs start: a queue, and a
    timer for its head. A gate closed before its deadline (the common case) just stays queued until then, so the
    queue holds about rate x grace entries."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._queue: deque[tuple[float, StartGate]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, gate: StartGate) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a pipeline reused across asyncio.run calls): start afresh
            self._loop, self._queue, self._timer = loop, deque(), None
        self._queue.append((loop.time() + self.grace_s, gate))
        if self._timer is None:
            self._timer = loop.call_at(self._queue[0][0], self._due)

    def _due(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._queue and self._queue[0][0] <= now:
            self._queue.popleft()[1].send()  # a no-op for a gate closed already
        self._timer = loop.call_at(self._queue[0][0], self._due) if self._queue else None


class StartGate:
    """One run's STARTED: `send()` it now (once), or `skip()` it when the run ended within the grace.

    Lives on the SDK's event loop; `graces` sends it when the grace ends (a grace of 0 sends it at once). The ack
    of the STARTED it sent is appended to `acks` (the run's records that must be acknowledged before its offset
    is committed)."""

    def __init__(self, send: Callable[[], Future[Any]], *, started_ms: int, graces: Graces,
                 acks: list[Future[Any]]) -> None:
        self._send = send
        self._acks = acks
        self.started_ms = started_ms
        self._open = True  # neither sent nor skipped yet
        if graces.grace_s <= 0:
            self.send()
        else:
            graces.watch(self)

    @property
    def sent(self) -> bool:
        """STARTED went out for this run (or it was skipped, once the run ended)."""
        return not self._open

    def send(self) -> None:
        """STARTED now, unless it was sent or skipped already."""
        if not self._open:
            return
        self._open = False
        self._acks.append(self._send())

    def skip(self) -> int | None:
        """The run ended with a terminal outcome: the start time its terminal receipt carries (`started_at`), or
        None when STARTED was sent already (the grace had passed, or a progress receipt went out)."""
        if not self._open:
            return None
        self._open = False
        return self.started_ms
