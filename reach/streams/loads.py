"""Per-instance load: the heartbeat's inflight plus what was routed to the instance since that heartbeat.

An entry is added when a ROUTED decision is made (by this worker at once, by other workers when
their ROUTED receipt is read) and removed by the message's next terminal, ATTEMPT_FAILED or
RETRY_SCHEDULED receipt, or by a heartbeat newer than the routing (the agent then counts the
message in its own inflight). A message routed before a heartbeat but not yet polled by the agent
is briefly under-counted; the next heartbeat corrects it. Thread-safe: the hot loop and the state
loop both touch it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from reach.records import AgentRegistration

MessageKey = tuple[str, int, int]  # (message_id, generation, attempt)


class LoadTracker:
    """Counts routed-but-unfinished messages per instance."""

    def __init__(self, *, remember_finished: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._where: dict[MessageKey, tuple[str, int]] = {}
        self._by_instance: dict[str, dict[MessageKey, int]] = {}
        self._finished: OrderedDict[MessageKey, None] = OrderedDict()
        self._remember = remember_finished

    def routed(self, key: MessageKey, instance_id: str, at_ms: int) -> None:
        with self._lock:
            if key in self._finished:
                return  # its terminal receipt overtook the ROUTED receipt
            self._drop(key)
            self._where[key] = (instance_id, at_ms)
            self._by_instance.setdefault(instance_id, {})[key] = at_ms

    def finished(self, key: MessageKey) -> None:
        with self._lock:
            self._drop(key)
            self._finished[key] = None
            if len(self._finished) > self._remember:
                self._finished.popitem(last=False)

    def heartbeat(self, instance_id: str, heartbeat_at: int) -> None:
        with self._lock:
            mine = self._by_instance.get(instance_id)
            if not mine:
                return
            for key in [k for k, at in mine.items() if at <= heartbeat_at]:
                del mine[key]
                self._where.pop(key, None)

    def pending(self, instance_id: str) -> int:
        with self._lock:
            return len(self._by_instance.get(instance_id, ()))

    def loads(self, registrations: Iterable[AgentRegistration]) -> dict[str, int]:
        """instance_id -> heartbeat inflight + routed since that heartbeat."""
        with self._lock:
            return {r.instance_id: r.inflight + len(self._by_instance.get(r.instance_id, ())) for r in registrations}

    def _drop(self, key: MessageKey) -> None:
        found = self._where.pop(key, None)
        if found is not None:
            self._by_instance.get(found[0], {}).pop(key, None)
