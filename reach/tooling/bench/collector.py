"""Reads receipts and the status table's changelog while the round trip runs; the analysis happens afterwards.

The loop only stores raw records and counts terminal rows per message-id prefix (a substring test on
the row's JSON), so the bench process stays light while the router and the agent are measured.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from reach.kafka import clients
from reach.tooling.bench.workspace import Workspace

_OPEN_ROWS = (b'"terminal_at":null', b'"terminal_at": null')  # faust's json, compact or not


@dataclass
class Seen:
    """Raw observations: receipts as (value, broker ts), first terminal status row per message id."""

    receipts: list[bytes] = field(default_factory=list)
    terminal_rows: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    terminal_by_prefix: Counter[str] = field(default_factory=Counter)


class Collector:
    """A thread consuming `<ns>.receipts` and `<ns>.status` from their current end."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.seen = Seen()
        self.finished: set[str] = set()  # every message id with a terminal row, across take()
        self._consumer: Consumer = ws.consumer(profile="feed")  # judged by the records' own times
        ends = ws.end_offsets([ws.names.receipts, ws.names.status], self._consumer)
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in ends.items()])
        self._thread = threading.Thread(target=self._run, name="bench-collector", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Collector:
        self._thread.start()
        return self

    def terminal(self, prefix: str) -> int:
        with self._lock:
            return self.seen.terminal_by_prefix[prefix]

    def missing(self, ids: set[str]) -> set[str]:
        """The ids among `ids` that have no terminal status row yet."""
        with self._lock:
            return ids - self.finished

    def take(self) -> Seen:
        """What was seen so far; the collector starts a fresh record."""
        with self._lock:
            seen, self.seen = self.seen, Seen()
            return seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _run(self) -> None:
        receipts, status = self._ws.names.receipts, self._ws.names.status
        try:
            while not self._stop.is_set():
                batch = clients.take(self._consumer, 2_000, 0.1)
                with self._lock:
                    seen = self.seen
                    for msg in batch:
                        value = msg.value()
                        if msg.error() is not None or value is None:
                            continue
                        topic = msg.topic()
                        if topic == receipts:
                            seen.receipts.append(value)
                        elif topic == status and not any(open_ in value for open_ in _OPEN_ROWS):
                            key = (msg.key() or b"").decode()
                            self.finished.add(key)
                            if key not in seen.terminal_rows:
                                seen.terminal_rows[key] = (msg.timestamp()[1], value)
                                seen.terminal_by_prefix[key.rsplit("-", 1)[0]] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the round trip
            self.error = exc
