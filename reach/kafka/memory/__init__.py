"""An in-process Kafka behind confluent-kafka's client API: topics, partitions, offsets, consumer groups.

`reach.kafka.clients` builds these clients instead of librdkafka's when `bootstrap.servers` is
`memory://<name>` (REACH_BOOTSTRAP): every Consumer, Producer and AdminClient of one name shares one `Bus`,
so the real router, agent runner, status fold, delay tiers and timekeeper run in one process with no broker
(tests/unit/e2e, docs/architecture.md "Running the request path in memory"). It implements the subset of the
API Reach calls, with the semantics Reach relies on:

- producers partition keyed records with murmur2 (Java's, as `partitioner=murmur2_random` does), so a
  message_id's receipts land where `reach.streams.status.lookup.partition_of` looks; a record is readable as
  soon as it is produced, and its delivery report is served by the producer's poll() or flush();
- consumers in one group share the partitions of the topics they subscribe to (names or `^regex`), round
  robin; a member joining or leaving, or a new topic, rebalances the group inside each member's next
  poll/consume, with `on_revoke`/`on_assign` called there (eager, or incremental for cooperative-sticky);
- commits are per group; an asynchronous commit is answered through the consumer's `on_commit` inside poll.

Not modelled: replication, retention and compaction (a compacted topic keeps every record; readers take the
latest per key anyway), transactions, session timeouts (a member leaves by close() or unsubscribe()).
"""

from __future__ import annotations

import threading
from typing import Any

from reach.kafka.memory.admin import MemoryAdmin
from reach.kafka.memory.bus import Bus
from reach.kafka.memory.consumer import MemoryConsumer
from reach.kafka.memory.producer import MemoryProducer

__all__ = ["SCHEME", "Bus", "MemoryAdmin", "MemoryConsumer", "MemoryProducer", "bus", "bus_name", "forget"]

SCHEME = "memory://"


def bus_name(conf: dict[str, Any]) -> str | None:
    """The bus a client config asks for (`bootstrap.servers` = memory://<name>), None for a real broker."""
    servers = str(conf.get("bootstrap.servers") or "")
    return servers[len(SCHEME):] or "default" if servers.startswith(SCHEME) else None


_BUSES: dict[str, Bus] = {}
_BUSES_LOCK = threading.Lock()


def bus(name: str) -> Bus:
    """The bus of that name, created empty on first use (one per process and name)."""
    with _BUSES_LOCK:
        if name not in _BUSES:
            _BUSES[name] = Bus(name)
        return _BUSES[name]


def forget(name: str) -> None:
    """Drop a bus: the next client of that name starts on an empty one."""
    with _BUSES_LOCK:
        _BUSES.pop(name, None)
