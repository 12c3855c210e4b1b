"""Which inbox partitions this instance may still start handlers for, including after it was frozen.

An instance stopped (SIGSTOP, a VM pause, a long stall) past its session timeout has lost its partitions
without knowing it: when it runs again, records it fetched before (its backlog, claims whose answer was on
the way) would start at once, while the instance that took the partitions over runs them too. librdkafka
reports the loss (`on_lost` / `on_revoke`) only at a later poll. So a ticker thread notes the time every
`tick_s`, and a handler starts only for a partition still assigned, while the ticks are current, and not
within `settle_s` after a gap between ticks long enough to have cost the session (the whole process was
frozen: librdkafka's heartbeats stopped too): by then librdkafka has heard from the group coordinator and the
consumer's thread has taken the lost partitions out of the set. A consumer thread merely busy (a revoke waiting
for handlers) is no freeze: librdkafka heartbeats from threads of its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("reach.agent")
WAIT_S = 0.05
TICK_S = 0.25


class Ownership:
    """Written by the consumer's thread (assign, revoke) and the ticker; asked from the handlers' event loop."""

    def __init__(self, *, stale_s: float, settle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._stale_s = stale_s  # a gap between ticks this long may have cost the session
        self._settle_s = settle_s  # after such a gap: time for the coordinator's answer (a heartbeat or two)
        self._clock = clock
        self._owned: frozenset[int] = frozenset()  # replaced, never mutated: read from another thread
        self._ticked = clock()
        self._open_at = float("-inf")
        self.freezes = 0  # gaps noticed (each delays new handlers by settle_s)

    def start(self) -> None:
        self._ticked = self._clock()
        _TICKER.add(self)

    def stop(self) -> None:
        _TICKER.remove(self)

    # -- the consumer's thread -----------------------------------------------------------------------
    def assigned(self, partitions: Iterable[int]) -> None:
        self._owned = self._owned | frozenset(partitions)

    def revoked(self, partitions: Iterable[int]) -> None:
        """Called first thing in a revoke or loss: records not yet started there are left to the next owner."""
        self._owned = self._owned - frozenset(partitions)

    def tick(self) -> None:
        now = self._clock()
        if now - self._ticked > self._stale_s:
            self.freezes += 1
            self._open_at = now + self._settle_s
            log.warning("this instance was frozen for %.1fs (its session timeout may have passed): no new handler "
                        "starts for %.1fs, until the group has said which partitions are still ours",
                        now - self._ticked, self._settle_s)
        self._ticked = now

    # -- any thread -----------------------------------------------------------------------------------
    def admits(self, partition: int) -> bool | None:
        """True: start it; False: never (the partition is not ours); None: not yet (the ticks are stale, or the
        group's answer after a freeze is still due)."""
        if partition not in self._owned:
            return False
        now = self._clock()
        if now - self._ticked > self._stale_s or now < self._open_at:
            return None
        return True

    async def admitted(self, partition: int) -> bool:
        """Waits while the answer is 'not yet'."""
        while (answer := self.admits(partition)) is None:
            await asyncio.sleep(WAIT_S)
        return answer


class _Ticker:
    """One thread ticks every started Ownership of the process (decision 0073): a freeze stops the whole
    process, so one thread notices it for all of its instances, and a hundred instances do not wake a hundred
    threads four times a second. The thread runs while any Ownership is started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: set[Ownership] = set()
        self._thread: threading.Thread | None = None

    def add(self, ownership: Ownership) -> None:
        with self._lock:
            self._started.add(ownership)
            if self._thread is None:
                self._thread = threading.Thread(target=self._tick_forever, name="reach-ownership", daemon=True)
                self._thread.start()

    def remove(self, ownership: Ownership) -> None:
        with self._lock:
            self._started.discard(ownership)

    def _tick_forever(self) -> None:
        while True:
            time.sleep(TICK_S)
            with self._lock:
                started = list(self._started)
                if not started:
                    self._thread = None
                    return
            for ownership in started:
                ownership.tick()


_TICKER = _Ticker()
