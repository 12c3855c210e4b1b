"""When a run's STARTED receipt goes out: not at all for a run that ends within the grace, else when the grace ends.

A handler that returns within `grace_s` (the default 50 ms) ends with its terminal receipt alone, which carries
the start time in its `timings` under `started_at` (epoch ms): one record fewer per request for the broker and for
every consumer of the receipts. A run still going when the grace ends sends STARTED then, so the timekeeper's
delivery timeout (ROUTED -> STARTED) sees it at most `grace_s` later than when STARTED went out first. STARTED is
sent before anything else the run publishes (a PROGRESS receipt, a non-terminal outcome), so the receipts of a run
keep their order. docs/decisions/0056-agent-batch-path.md."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

STARTED_AT = "started_at"
"""The terminal receipt's `timings` key for the start time of a run whose STARTED was skipped (epoch ms)."""
DEFAULT_GRACE_MS = 50


class StartGate:
    """One run's STARTED: `send()` it now (once), or `skip()` it when the run ended within the grace.

    Lives on the SDK's event loop; the grace is a loop timer, not a task. The ack of the STARTED it sent is
    appended to `acks` (the run's records that must be acknowledged before its offset is committed)."""

    def __init__(self, send: Callable[[], Future[Any]], *, started_ms: int, grace_s: float,
                 acks: list[Future[Any]]) -> None:
        self._send = send
        self._acks = acks
        self.started_ms = started_ms
        self._open = True  # neither sent nor skipped yet
        self._timer: asyncio.TimerHandle | None = None
        if grace_s <= 0:
            self.send()
        else:
            self._timer = asyncio.get_running_loop().call_later(grace_s, self.send)

    def send(self) -> None:
        """STARTED now, unless it was sent or skipped already."""
        if not self._open:
            return
        self._close()
        self._acks.append(self._send())

    def skip(self) -> int | None:
        """The run ended with a terminal outcome: the start time its terminal receipt carries (`started_at`), or
        None when STARTED was sent already (the grace had passed, or a progress receipt went out)."""
        if not self._open:
            return None
        self._close()
        return self.started_ms

    def _close(self) -> None:
        self._open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
