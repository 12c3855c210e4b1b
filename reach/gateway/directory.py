"""The gateway's AppDirectory: follows the compacted apps topic from the beginning on a daemon thread.

Ready once it has read up to the end offsets seen at start; after that a change (a new key, a revoked one)
is visible as soon as the record is fetched (a poll every 0.2 s, the broker answering within 100 ms).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from reach.apps import AppTable
from reach.appstore import kafka_guarded
from reach.callers import KeyEntry
from reach.errors import InfraUnavailable
from reach.kafka import clients, topicreader, types
from reach.kafka.codec import RegistryUnavailable
from reach.names import Names
from reach.secretbox import SecretBox
from reach.settings import KafkaSettings

log = logging.getLogger("reach.gateway.directory")
POLL_S = 0.2
REGISTRY_RETRY_S = 1.0


class KafkaAppDirectory:
    """Live keys by key id, as the apps topic says now (satisfies reach.callers.AppDirectory)."""

    def __init__(self, *, names: Names, box: SecretBox, kafka: KafkaSettings,
                 open_consumer: Callable[[], types.Consumer] | None = None, table: AppTable | None = None) -> None:
        self._topic = names.apps
        self._open = open_consumer or (lambda: topicreader.open_reader("gateway-apps", kafka, profile="idle"))
        self.table = table or AppTable(box)  # the console passes an OperatorTable
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: types.Consumer | None = None
        self._ends: dict[int, int] = {}

    @property
    def refused(self) -> int:
        """Records skipped so far (undecodable, or sealed under another secrets key)."""
        return self.table.refused

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def lookup(self, key_id: str) -> KeyEntry | None:
        return self.table.lookup(key_id)

    def start(self, timeout: float = 30.0) -> None:
        """Assign every partition from the beginning, start following; return once caught up."""
        consumer = self._open()
        try:
            with kafka_guarded(f"starting to follow {self._topic}"):
                parts = topicreader.partitions(consumer, self._topic, timeout)
                self._ends = {p: topicreader.watermarks(consumer, self._topic, p, timeout)[1] for p in parts}
        except Exception:
            consumer.close()
            raise
        clients.assign(consumer, self._topic, dict.fromkeys(parts, types.OFFSET_BEGINNING))
        self._consumer = consumer
        self._thread = threading.Thread(target=self._follow, name="reach-gateway-apps", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise InfraUnavailable(f"The gateway could not read {self._topic} to its end within {timeout:.0f} s; "
                                   "is the broker up?")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _caught_up(self, consumer: types.Consumer) -> bool:
        positions = clients.positions(consumer, self._topic, self._ends)
        return all(self._ends[p] == 0 or offset >= self._ends[p] for p, offset in positions.items())

    @property
    def alive(self) -> bool:
        """False once the follower thread has stopped (after stop(), or a failure it logged)."""
        return self._thread is not None and self._thread.is_alive()

    def _apply(self, key: bytes | None, value: bytes | None, where: str) -> None:
        while not self._stop.is_set():
            try:
                self.table.apply_raw(key, value, where=where)
                return
            except RegistryUnavailable as exc:  # the record may be fine: skipping it could miss a revocation
                log.warning("apps record at %s: the schema registry does not answer (%s); retrying", where, exc)
                self._stop.wait(REGISTRY_RETRY_S)

    def _follow(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while not self._stop.is_set():
                for msg in clients.take(consumer, 500, POLL_S):
                    if msg.error():
                        log.warning("apps topic: %s", msg.error())
                        continue
                    self._apply(msg.key(), msg.value(), f"{self._topic}@{msg.offset()}")
                if not self._ready.is_set() and self._caught_up(consumer):
                    self._ready.set()
        except Exception:  # noqa: BLE001 - logged; `alive` turns False for the gateway's health check
            log.exception("the apps directory stopped following %s", self._topic)
        finally:
            consumer.close()
            self._consumer = None
