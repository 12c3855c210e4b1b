"""Business idempotency keys on Kafka: every COMPLETED run of a keyed envelope also goes to the compacted topic
`<ns>.idempotency`, keyed `<capability> <digest>` (reach.agent.idempotency.KeyScope), its value the COMPLETED
receipt the key's Redis entry holds. Redis stays the fast path; the ledger is asked only while Redis's memory is
younger than a key's window (reach.agent.memorymark), so a Redis that came back empty never runs a completed key
again (docs/decisions/0041-idempotency-and-sessions-from-kafka.md).

Reading: the first question after Redis's memory began loads the ledger's records of the last window (from the
offsets at `now - window` by time, up to the end) for the capabilities this agent serves, once per memory start;
a result recorded after that start is in Redis, so one load answers the whole window."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from reach.agent.idempotency import DEFAULT_IDEMPOTENCY_WINDOW_MS, KeyScope
from reach.failures import Outgoing
from reach.kafka import topicreader
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent")


def ledger_key(scope: KeyScope) -> str:
    return f"{scope.capability} {scope.digest}"


class KeyLedger(Protocol):
    """Where COMPLETED results of business keys outlive Redis."""

    def record(self, scope: KeyScope, receipt: bytes) -> Outgoing:
        """The record to publish beside the COMPLETED receipt of a keyed run."""
        ...

    async def completed(self, scope: KeyScope, *, now_ms: int, memory_since_ms: int) -> bytes | None:
        """The COMPLETED receipt recorded for the key within its window, else None (may raise InfraUnavailable)."""
        ...


class MemoryKeyLedger:
    """The in-memory twin (tests): what was recorded, by key, with the time it was recorded."""

    def __init__(self, topic: str = "idempotency") -> None:
        self.topic = topic
        self.entries: dict[str, tuple[bytes, int]] = {}
        self.asked = 0

    def record(self, scope: KeyScope, receipt: bytes) -> Outgoing:
        return Outgoing(self.topic, ledger_key(scope), receipt, [])

    def keep(self, record: Outgoing, at_ms: int) -> None:
        """What the broker would do with `record` (the test publishes through it)."""
        self.entries[record.key] = (record.value or b"", at_ms)

    async def completed(self, scope: KeyScope, *, now_ms: int, memory_since_ms: int) -> bytes | None:
        self.asked += 1
        found = self.entries.get(ledger_key(scope))
        return found[0] if found is not None and now_ms - found[1] < scope.window_ms else None


class KafkaKeyLedger:
    """The compacted topic, loaded on demand (blocking reads run in the default executor)."""

    def __init__(self, *, topic: str, kafka: KafkaSettings, capabilities: Iterable[str]) -> None:
        self.topic = topic
        self._kafka = kafka
        self._prefixes = tuple(f"{c} " for c in capabilities)
        self._lock = threading.Lock()
        self._loaded_for: int | None = None
        self._entries: dict[str, tuple[bytes, int]] = {}

    def record(self, scope: KeyScope, receipt: bytes) -> Outgoing:
        """The record to publish; also kept in the loaded window (while Redis is out, the next load of this
        process's ledger may be a minute away, and a resend of this key must still find it)."""
        if self._loaded_for is not None:
            self._entries[ledger_key(scope)] = (receipt, int(time.time() * 1000))
        return Outgoing(self.topic, ledger_key(scope), receipt, [])

    async def completed(self, scope: KeyScope, *, now_ms: int, memory_since_ms: int) -> bytes | None:
        window_ms = max(scope.window_ms, DEFAULT_IDEMPOTENCY_WINDOW_MS)
        if self._loaded_for == memory_since_ms:  # loaded already (entries are set before it): no executor hop
            entries = self._entries
        else:
            entries = await asyncio.get_running_loop().run_in_executor(
                None, self._load, memory_since_ms, now_ms - window_ms)
        found = entries.get(ledger_key(scope))
        return found[0] if found is not None and now_ms - found[1] < scope.window_ms else None

    def _load(self, memory_since_ms: int, from_ms: int) -> dict[str, tuple[bytes, int]]:
        with self._lock:
            if self._loaded_for == memory_since_ms:
                return self._entries
            reader = topicreader.open_reader("key-ledger", self._kafka)
            entries: dict[str, tuple[bytes, int]] = {}
            try:
                starts = topicreader.start_offsets(reader, self.topic, from_ms)
                for msg in topicreader.read_range(reader, self.topic, starts):
                    key = (msg.key() or b"").decode(errors="replace")
                    value = msg.value()
                    if value is not None and key.startswith(self._prefixes):
                        entries[key] = (value, msg.timestamp()[1])  # the latest, as compaction keeps
            finally:
                reader.close()
            log.info("key ledger %s: %d business keys of the last window loaded (Redis's memory began at %d)",
                     self.topic, len(entries), memory_since_ms)
            self._entries, self._loaded_for = entries, memory_since_ms
            return entries
