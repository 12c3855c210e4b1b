"""Session affinity as a bounded map (pure): session_key -> the instance serving it and when it was last seen.

Held in memory by the routing worker whose capability partition the session's key lands on, and recorded on the
compacted topic `<ns>.sessions` (keyed by `scoped(tenant, session_key)`, the value `encode`'s JSON), which every
router reads from the beginning on start and then tails: a restarted worker, or the worker a rebalance hands the
partition to, knows the session's instance before it routes
(docs/decisions/0041-idempotency-and-sessions-from-kafka.md).

Bounded: at most `max_sessions` entries, the least recently used dropped first. Expiring: a session idle for more
than `ttl_ms` is forgotten, here and when read back (the record says when it was last seen). A record is written
when a session starts, when its instance changes, and when the last record of it is older than a quarter of the
TTL: an active session costs one record per `ttl_ms / 4`, not one per request, and a recovered entry's last-seen
time is at most that stale.

A session is its tenant's: the map and the topic are keyed by `scoped(tenant, session_key)` (`<tenant>/<key>`, the
tenant's `%` and `/` escaped), and a record's value names its tenant, so one tenant's session key never steers
another's requests. A record written before sessions were scoped (a bare session_key, no tenant in its value) is
not learned: such a session's next request picks its instance afresh, and the record is compacted away."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

DEFAULT_TTL_MS = 600_000
DEFAULT_MAX_SESSIONS = 200_000
RECORD_EVERY = 4  # a session's record is refreshed every ttl_ms / RECORD_EVERY while it is active


@dataclass(frozen=True, slots=True)
class Stick:
    """Where a session sticks: its instance, when it was last seen, when its last record was written (or read)."""

    instance_id: str
    seen_at: int
    recorded_at: int


class SessionMap:
    """session_key -> Stick, least recently used first."""

    def __init__(self, *, ttl_ms: int = DEFAULT_TTL_MS, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.ttl_ms = ttl_ms
        self._max = max_sessions
        self._entries: OrderedDict[str, Stick] = OrderedDict()

    def get(self, session_key: str | None, now_ms: int) -> str | None:
        """The session's instance, unless it has been idle past the TTL (then it is forgotten)."""
        if not session_key:
            return None
        entry = self._entries.get(session_key)
        if entry is None:
            return None
        if now_ms - entry.seen_at > self.ttl_ms:
            del self._entries[session_key]
            return None
        return entry.instance_id

    def set(self, session_key: str | None, instance_id: str, now_ms: int) -> bool:
        """The session was just routed to `instance_id`; True when that is worth a record on the sessions topic
        (a new session, another instance, or a last record older than ttl_ms / RECORD_EVERY)."""
        if not session_key:
            return False
        held = self._entries.get(session_key)
        record = (held is None or held.instance_id != instance_id
                  or now_ms - held.recorded_at >= self.ttl_ms // RECORD_EVERY)
        recorded_at = now_ms if record or held is None else held.recorded_at
        self._put(session_key, Stick(instance_id, now_ms, recorded_at))
        return record

    def learn(self, session_key: str, instance_id: str, seen_at: int, now_ms: int) -> bool:
        """A record read from the sessions topic (this worker's own, or another's before a restart or a
        rebalance); kept unless idle past the TTL or older than what is held. True when it was kept."""
        if not session_key or now_ms - seen_at > self.ttl_ms:
            return False
        held = self._entries.get(session_key)
        if held is not None and held.seen_at >= seen_at:
            return False
        self._put(session_key, Stick(instance_id, seen_at, seen_at))
        return True

    def forget(self, session_key: str) -> None:
        self._entries.pop(session_key, None)

    def _put(self, session_key: str, stick: Stick) -> None:
        self._entries[session_key] = stick
        self._entries.move_to_end(session_key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def scoped(tenant: str, session_key: str | None) -> str | None:
    """The map's and the topic's key of a tenant's session (None: no session)."""
    if not session_key:
        return None
    return _prefix(tenant) + session_key


def _prefix(tenant: str) -> str:
    return tenant.replace("%", "%25").replace("/", "%2F") + "/"


def encode(instance_id: str, seen_at: int, tenant: str | None = None) -> bytes:
    """A sessions topic record's value."""
    fields: dict[str, object] = {"instance_id": instance_id, "seen_at": seen_at}
    if tenant is not None:
        fields["tenant"] = tenant
    return json.dumps(fields, separators=(",", ":")).encode()


class Record(NamedTuple):
    """A sessions topic record's value: where the session stuck, when, and whose session it is (None: a record from
    before sessions were scoped by tenant)."""

    instance_id: str
    seen_at: int
    tenant: str | None = None

    def belongs(self, key: str) -> bool:
        """Whether this record may be learned under the topic key `key`: its tenant's scoped key."""
        return self.tenant is not None and key.startswith(_prefix(self.tenant))


def decode_record(value: bytes) -> Record:
    """A sessions topic record; ValueError when it is not one."""
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("a session record is a JSON object")
    instance_id, seen_at, tenant = data.get("instance_id"), data.get("seen_at"), data.get("tenant")
    if not isinstance(instance_id, str) or not instance_id or isinstance(seen_at, bool) or not isinstance(seen_at, int):
        raise ValueError(f"a session record needs instance_id (text) and seen_at (epoch ms): {data!r}")
    return Record(instance_id, seen_at, tenant if isinstance(tenant, str) else None)


def decode(value: bytes) -> tuple[str, int]:
    """(instance_id, seen_at) of a sessions topic record; ValueError when it is not one."""
    record = decode_record(value)
    return record.instance_id, record.seen_at
