"""The runs this agent instance finished or is running, in process: (message_id, generation) -> how it ended.

Redis's leases and result cache stop a redelivery from running a handler again, but only while Redis answers: in
a Redis outage (or a connect timeout under load) the SDK asks the status table, which lags the receipts by the
fold's delay, so a redelivery whose first COMPLETED had not reached the table yet ran again (the fault suite's
leader-sigkill run of 2026-12-03, docs/reliability.md). This record closes that window for the instance that ran
the message: before a handler starts, the pipeline asks it, and a run it finished re-sends its recorded terminal
(through the first-terminal register when Redis answers), one it is running is waited for, and an attempt whose
retry it already published is not run again. Another instance's runs are not here: that case stays Redis's
(docs/decisions/0046-in-process-record-of-runs.md).

Bounded in entries, bytes and age (an LRU; the oldest go first). Pure bookkeeping: one event loop, no I/O."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from reach.agent.outcomes import Outcome

DEFAULT_MAX_RUNS = 20_000
"""Runs remembered per instance: at 200 messages/s on one instance, the last 100 s (a redelivery to the same
instance comes after a rebalance or a failed commit, within a session timeout: 45 s by default)."""

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""What the entries may take, receipts and overhead counted (a large result fills it sooner: the oldest go first)."""

DEFAULT_TTL_S = 300.0
"""How long an ended run is remembered: past any redelivery to the same instance, and short enough that an idle or
slow instance's record stops growing within minutes (a soak judges an agent's RSS over its last half, 0039)."""

ENTRY_OVERHEAD_BYTES = 400
"""What an entry costs besides its receipt, counted against DEFAULT_MAX_BYTES: 316 bytes measured with tracemalloc
(key tuple, entry tuple, Ran, dict slot) and a ULID message id (decision 0046)."""


@dataclass(frozen=True, slots=True)
class Ran:
    """How an attempt ended here: `ending` is the terminal receipt published (the register's winner), or None
    when the outcome was not terminal (a retry or a question) and its records were acknowledged."""

    attempt: int
    outcome: Outcome
    ending: bytes | None = None


@dataclass(slots=True)
class Running:
    """A run in progress on this instance; `wait()` returns how it ended (None: it was abandoned, not ended)."""

    attempt: int
    _waiters: list[asyncio.Future[Ran | None]] = field(default_factory=list)

    async def wait(self) -> Ran | None:
        future: asyncio.Future[Ran | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return await future

    def _settle(self, ran: Ran | None) -> None:
        for future in self._waiters:
            if not future.done():
                future.set_result(ran)
        self._waiters.clear()


Found = Ran | Running


class RecentRuns:
    """`begin` before a handler runs (or the run already here), `ended` when its outcome is published, `abandon`
    when it stopped without one (shutdown); `find` for a delivery that has not started yet."""

    def __init__(self, *, max_runs: int = DEFAULT_MAX_RUNS, max_bytes: int = DEFAULT_MAX_BYTES,
                 ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        if max_runs < 0 or max_bytes < 0 or ttl_s < 0:
            raise ValueError(f"RecentRuns bounds must be >= 0; got max_runs={max_runs}, max_bytes={max_bytes}, "
                             f"ttl_s={ttl_s}")
        self._max_runs = max_runs
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[tuple[str, int], tuple[float, Found]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def find(self, message_id: str, generation: int) -> Found | None:
        """The run of (message_id, generation) here: ended, running, or None (never here, or forgotten)."""
        key = (message_id, generation)
        entry = self._entries.get(key)
        if entry is None:
            return None
        at, found = entry
        if isinstance(found, Ran) and self._clock() - at >= self._ttl_s:
            self._drop(key)
            return None
        return found

    def begin(self, message_id: str, generation: int, attempt: int) -> Found | None:
        """None when this run may start (it is recorded as running now); else the run already here. A finished
        non-terminal attempt earlier than `attempt` does not stop it (its retry is this delivery)."""
        found = self.find(message_id, generation)
        if isinstance(found, Running) or (isinstance(found, Ran) and (
                found.ending is not None or found.attempt >= attempt)):
            return found
        self._put((message_id, generation), Running(attempt))
        return None

    def ended(self, message_id: str, generation: int, ran: Ran) -> None:
        """Record how an attempt ended (replacing its running entry, whose waiters get `ran`)."""
        key = (message_id, generation)
        entry = self._entries.get(key)
        if entry is not None and isinstance(entry[1], Ran) and entry[1].ending is not None and ran.ending is None:
            return  # the generation ended already: a later non-terminal note never hides its ending
        self._put(key, ran)
        if entry is not None and isinstance(entry[1], Running):
            entry[1]._settle(ran)

    def abandon(self, message_id: str, generation: int) -> None:
        """The run stopped without an outcome (cancelled at shutdown): forget it, a redelivery runs it."""
        key = (message_id, generation)
        entry = self._entries.get(key)
        if entry is not None and isinstance(entry[1], Running):
            self._drop(key)
            entry[1]._settle(None)

    def _put(self, key: tuple[str, int], found: Found) -> None:
        if key in self._entries:
            self._drop(key)
        now = self._clock()
        self._entries[key] = (now, found)  # newest last: the oldest are evicted and expire first
        self._bytes += _size(found)
        while self._entries:
            oldest, (at, gone) = next(iter(self._entries.items()))
            expired = isinstance(gone, Ran) and now - at >= self._ttl_s
            if not expired and len(self._entries) <= self._max_runs and self._bytes <= self._max_bytes:
                break
            self._drop(oldest)
            if isinstance(gone, Running):
                gone._settle(None)  # its waiters run it themselves: bounded memory wins over a rare repeat

    def _drop(self, key: tuple[str, int]) -> None:
        _, found = self._entries.pop(key)
        self._bytes -= _size(found)


def _size(found: Found) -> int:
    return ENTRY_OVERHEAD_BYTES + (len(found.ending) if isinstance(found, Ran) and found.ending else 0)
