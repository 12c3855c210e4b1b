"""Routed lookups: which partition holds a message_id, and which fold worker owns that partition now.

Each fold worker's consumer client.id is `reach-status <its URL>`, so describing the fold's consumer
group tells any process (a routing-only worker too) where every partition lives; a view that does
not own a key forwards the request there.
"""

from __future__ import annotations

import threading
import time

from aiokafka.partitioner import murmur2

from reach.streams.groupadmin import GroupRequests

OWNER_PREFIX = "reach-status "


def partition_of(message_id: str, partitions: int) -> int:
    """The partition librdkafka's murmur2_random partitioner (Java's) puts a message_id key in."""
    return (murmur2(message_id.encode()) & 0x7FFFFFFF) % partitions


class Owners:
    """partition -> owner URL, from the fold group's member list (cached; refreshed on demand)."""

    def __init__(self, admin: GroupRequests, group: str, max_age_s: float = 2.0) -> None:
        self._admin = admin
        self._group = group
        self._max_age = max_age_s
        self._lock = threading.Lock()
        self._owners: dict[int, str] = {}
        self._at = 0.0

    def owners(self, *, fresh: bool = False) -> dict[int, str]:
        """Blocking (run it in an executor); an unreachable broker answers with what was known."""
        with self._lock:
            if fresh or time.monotonic() - self._at > self._max_age:
                self._owners = self._describe()
                self._at = time.monotonic()
            return dict(self._owners)

    def _describe(self) -> dict[int, str]:
        future = self._admin.describe_consumer_groups([self._group], request_timeout=5)[self._group]
        found: dict[int, str] = {}
        for member in future.result(timeout=10).members:
            url = (member.client_id or "")[len(OWNER_PREFIX):] if (member.client_id or "").startswith(
                OWNER_PREFIX) else None
            if url and member.assignment is not None:
                for tp in member.assignment.topic_partitions:
                    found[tp.partition] = url
        return found
