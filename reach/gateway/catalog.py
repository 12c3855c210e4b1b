"""The live capability versions, from a background reader of `<ns>.registry` (compacted, read from the start)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable, ReachError
from reach.kafka import clients, topicreader, types
from reach.names import Names
from reach.records import Capability, CapabilityMode
from reach.registry import apply_record
from reach.settings import KafkaSettings

log = logging.getLogger("reach.gateway.catalog")


def live_versions(view: RegistryView, capability: str, tenant: str, now_ms: int) -> list[Capability]:
    """One entry per distinct live HANDLE version of `capability` that serves `tenant`."""
    found: dict[str, Capability] = {}
    for reg in view.live(now_ms):
        if reg.tenants and tenant not in reg.tenants:
            continue
        for cap in reg.capabilities:
            if cap.name == capability and cap.mode is CapabilityMode.HANDLE:
                found.setdefault(cap.version, cap)
    return list(found.values())


def live_capabilities(view: RegistryView, tenant: str | None, now_ms: int) -> list[Capability]:
    """Every live HANDLE capability version serving `tenant` (None: instances open to every tenant)."""
    found: dict[tuple[str, str], Capability] = {}
    for reg in view.live(now_ms):
        if reg.tenants and (tenant is None or tenant not in reg.tenants):
            continue
        for cap in reg.capabilities:
            if cap.mode is CapabilityMode.HANDLE:
                found.setdefault((cap.name, cap.version), cap)
    return list(found.values())


def dependencies(view: RegistryView, now_ms: int) -> dict[str, list[str]]:
    """What each live HANDLE capability calls: the `depends_on` of the live instances serving it, merged and sorted
    (instances of two builds may declare different lists while a rollout runs)."""
    found: dict[str, set[str]] = {}
    for reg in view.live(now_ms):
        for cap in reg.capabilities:
            if cap.mode is CapabilityMode.HANDLE and reg.depends_on:
                found.setdefault(cap.name, set()).update(reg.depends_on)
    return {name: sorted(calls) for name, calls in sorted(found.items())}


class RegistryCatalog:
    """A RegistryView kept current by one thread (assign, no consumer group), like the router's state loop."""

    def __init__(self, *, names: Names, kafka: KafkaSettings) -> None:
        self._names = names
        self._kafka = kafka
        self._view = RegistryView()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="reach-gateway-registry", daemon=True)

    def begin(self) -> None:
        """Start following without waiting: `ready` is set once the registry was read, `error` says why not yet."""
        self._thread.start()

    def start(self, ready_timeout: float = 30.0) -> None:
        self.begin()
        if not self.ready.wait(ready_timeout):
            raise InfraUnavailable(f"the gateway could not read {self._names.registry} within {ready_timeout:.0f}s "
                                   f"({self.error or 'no answer'}); is the broker up and `reach topics apply` done?")

    def versions(self, capability: str, tenant: str, now_ms: int) -> Sequence[Capability]:
        with self._lock:
            return live_versions(self._view, capability, tenant, now_ms)

    def live_capabilities(self, tenant: str | None, now_ms: int) -> Sequence[Capability]:
        with self._lock:
            return live_capabilities(self._view, tenant, now_ms)

    def dependencies(self, now_ms: int) -> dict[str, list[str]]:
        with self._lock:
            return dependencies(self._view, now_ms)

    def healthy(self) -> bool:
        return self.ready.is_set() and self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                self._follow()
                return
            except (types.KafkaException, ReachError) as exc:  # NOT_LEADER after topic creation, a missing topic
                self.error = exc
                log.warning("registry reader restarting in %.1fs: %s", backoff, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _follow(self) -> None:
        consumer = topicreader.open_reader("gateway-registry", self._kafka, profile="idle")
        topic = self._names.registry
        try:
            parts = topicreader.partitions(consumer, topic)
            ends = {p: topicreader.watermarks(consumer, topic, p)[1] for p in parts}
            clients.assign(consumer, topic, dict.fromkeys(parts, types.OFFSET_BEGINNING))
            todo = {p for p, end in ends.items() if end > 0}
            while not self._stop.is_set():
                batch = clients.take(consumer, 500, 0.2)
                for msg in batch:
                    if msg.error():
                        continue
                    with self._lock:
                        apply_record(self._view, msg.key(), msg.value())
                    part = msg.partition()
                    if part in todo and (msg.offset() or 0) + 1 >= ends[part]:
                        todo.discard(part)
                if todo and not batch:  # idle: a position at the end counts (the tail may be compacted away)
                    for part, offset in clients.positions(consumer, topic, todo).items():
                        if offset >= ends[part]:
                            todo.discard(part)
                if not todo:
                    self.error = None
                    self.ready.set()
        finally:
            consumer.close()
