"""Session affinity as a bounded map (pure): session_key -> the instance serving it and when it was last seen.

Held in memory by the routing worker whose capability partition the session's key lands on, and recorded on the
compacted topic `<ns>.sessions` (keyed by `scoped(tenant, session_key)`, the value `encode`'s JSON), which every
router reads from the beginning on start and then tails: a restarted worker, or the worker a rebalance hands the
partition to, knows the session's instance before it routes
(docs/decisions/0041-idempotency-and-sessions-from-kafka.md).

Bounded: at most `max_sessions` entries. Past it, the least recently used entry of the tenant holding the most
is dropped, so one tenant's fresh session keys evict its own sessions, never a smaller tenant's. The snapshots
held are bounded in bytes too (`max_snapshot_bytes`, 256 MiB by default): past it the least recently used
snapshots are dropped and their sessions keep their instance (the next request of such a session carries no
snapshot). Expiring: a session idle for more
than `ttl_ms` is forgotten, here and when read back (the record says when it was last seen). A record is written
when a session starts, when its instance changes, and when the last record of it is older than a quarter of the
TTL: an active session costs one record per `ttl_ms / 4`, not one per request, and a recovered entry's last-seen
time is at most that stale.

A session is its tenant's: the map and the topic are keyed by `scoped(tenant, session_key)` (`<tenant>/<key>`, the
tenant's `%` and `/` escaped), and a record's value names its tenant, so one tenant's session key never steers
another's requests. A record written before sessions were scoped (a bare session_key, no tenant in its value) is
not learned: such a session's next request picks its instance afresh, and the record is compacted away.

A session also has a snapshot: a JSON object as text (at most MAX_SNAPSHOT_BYTES) that a handler wrote back with
`ctx.session`. The agent records it here (`snapshot`, `snapshot_at`) beside its instance; every router learns it
and the routing worker puts the newest one in the `session_snapshot` of the session's next envelope, whichever
instance that goes to. A snapshot is a whole value: the newest write wins (by `snapshot_at`), and a router's own
records carry the snapshot it holds so that compaction keeps it (docs/decisions/0076)."""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

DEFAULT_TTL_MS = 600_000
DEFAULT_MAX_SESSIONS = 200_000
DEFAULT_MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024
"""The snapshots one map holds, in bytes at most (200,000 sessions of 16 KiB would be 3.3 GB)."""
RECORD_EVERY = 4  # a session's record is refreshed every ttl_ms / RECORD_EVERY while it is active
MAX_SNAPSHOT_BYTES = 16 * 1024
"""A session snapshot's size at most, as compact JSON text: it travels inside every envelope of the session (the
router's envelope limit leaves 64 KiB beside the payload)."""


@dataclass(frozen=True, slots=True)
class Stick:
    """Where a session sticks: its instance, when it was last seen, when its last record was written (or read)."""

    instance_id: str
    seen_at: int
    recorded_at: int
    snapshot: str | None = None  # the session's snapshot, as its handlers last wrote it back
    snapshot_at: int = 0  # when it was written


class SessionMap:
    """session_key -> Stick, least recently used first within each tenant (the key's `scoped` prefix)."""

    def __init__(self, *, ttl_ms: int = DEFAULT_TTL_MS, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES) -> None:
        self.ttl_ms = ttl_ms
        self._max = max_sessions
        self._max_snapshot_bytes = max_snapshot_bytes
        self._tenants: dict[str, OrderedDict[str, Stick]] = {}  # tenant prefix -> its sessions, LRU first
        self._count = 0
        self._snapshots: OrderedDict[str, int] = OrderedDict()  # session_key -> its snapshot's bytes, LRU first
        self._snapshot_bytes = 0

    def get(self, session_key: str | None, now_ms: int) -> str | None:
        """The session's instance, unless it has been idle past the TTL (then it is forgotten)."""
        if not session_key:
            return None
        entry = self._held(session_key)
        if entry is None:
            return None
        if now_ms - entry.seen_at > self.ttl_ms:
            self.forget(session_key)
            return None
        return entry.instance_id

    def set(self, session_key: str | None, instance_id: str, now_ms: int) -> bool:
        """The session was just routed to `instance_id`; True when that is worth a record on the sessions topic
        (a new session, another instance, or a last record older than ttl_ms / RECORD_EVERY)."""
        if not session_key:
            return False
        held = self._held(session_key)
        record = (held is None or held.instance_id != instance_id
                  or now_ms - held.recorded_at >= self.ttl_ms // RECORD_EVERY)
        recorded_at = now_ms if record or held is None else held.recorded_at
        snapshot, snapshot_at = (held.snapshot, held.snapshot_at) if held is not None else (None, 0)
        self._put(session_key, Stick(instance_id, now_ms, recorded_at, snapshot, snapshot_at))
        return record

    def learn(self, session_key: str, instance_id: str, seen_at: int, now_ms: int, *,
              snapshot: str | None = None, snapshot_at: int = 0) -> bool:
        """A record read from the sessions topic (this worker's own, another's before a restart or a rebalance, or
        an agent's that wrote the session's snapshot back); kept unless idle past the TTL or older than what is
        held. Where the session sticks and its snapshot are learned apart: a snapshot newer than the one held is
        kept even from a record whose instance is older. True when anything was kept."""
        if not session_key or now_ms - seen_at > self.ttl_ms:
            return False
        held = self._held(session_key)
        newer = held is None or held.seen_at < seen_at
        fresher = snapshot is not None and (held is None or held.snapshot_at < snapshot_at)
        if not newer and not fresher:
            return False
        kept = (snapshot, snapshot_at) if fresher else (held.snapshot, held.snapshot_at) if held else (None, 0)
        where = Stick(instance_id, seen_at, seen_at) if newer or held is None else held
        base = Stick(where.instance_id, where.seen_at, where.recorded_at, *kept)
        self._put(session_key, base)
        return True

    def snapshot(self, session_key: str | None, now_ms: int) -> tuple[str | None, int]:
        """The session's snapshot and when it was written ((None, 0): none, or the session idled past the TTL)."""
        if not session_key or self.get(session_key, now_ms) is None:
            return None, 0
        held = self._held(session_key)
        return (held.snapshot, held.snapshot_at) if held is not None else (None, 0)

    def forget(self, session_key: str) -> None:
        tenant = _tenant_of(session_key)
        entries = self._tenants.get(tenant)
        if entries is None or entries.pop(session_key, None) is None:
            return
        self._count -= 1
        self._snapshot_bytes -= self._snapshots.pop(session_key, 0)
        if not entries:
            del self._tenants[tenant]

    def _held(self, session_key: str) -> Stick | None:
        entries = self._tenants.get(_tenant_of(session_key))
        return entries.get(session_key) if entries is not None else None

    def _put(self, session_key: str, stick: Stick) -> None:
        entries = self._tenants.setdefault(_tenant_of(session_key), OrderedDict())
        if entries.pop(session_key, None) is None:
            self._count += 1
        entries[session_key] = stick
        self._snapshot_bytes -= self._snapshots.pop(session_key, 0)
        if stick.snapshot is not None:
            size = len(stick.snapshot.encode())
            self._snapshots[session_key] = size
            self._snapshot_bytes += size
        while self._count > self._max:  # the tenant holding the most gives up its least recently used
            largest = max(self._tenants.values(), key=len)
            self.forget(next(iter(largest)))
        while self._snapshot_bytes > self._max_snapshot_bytes:  # the oldest snapshots go; their sessions stay
            key, size = self._snapshots.popitem(last=False)
            self._snapshot_bytes -= size
            held = self._held(key)
            if held is not None:
                self._tenants[_tenant_of(key)][key] = dataclasses.replace(held, snapshot=None, snapshot_at=0)

    def __len__(self) -> int:
        return self._count

    def snapshot_bytes(self) -> int:
        """The bytes of the snapshots held."""
        return self._snapshot_bytes


def scoped(tenant: str, session_key: str | None) -> str | None:
    """The map's and the topic's key of a tenant's session (None: no session)."""
    if not session_key:
        return None
    return _prefix(tenant) + session_key


def _tenant_of(session_key: str) -> str:
    """A scoped key's tenant prefix (the tenant's `/` is escaped, so it ends at the first `/`; "" when unscoped)."""
    return session_key[:session_key.find("/") + 1]


def _prefix(tenant: str) -> str:
    return tenant.replace("%", "%25").replace("/", "%2F") + "/"


def encode(instance_id: str, seen_at: int, tenant: str | None = None, *, snapshot: str | None = None,
           snapshot_at: int = 0) -> bytes:
    """A sessions topic record's value (`snapshot`: the session's snapshot as JSON text, with when it was written)."""
    fields: dict[str, object] = {"instance_id": instance_id, "seen_at": seen_at}
    if tenant is not None:
        fields["tenant"] = tenant
    if snapshot is not None:
        fields["snapshot"] = snapshot
        fields["snapshot_at"] = snapshot_at
    return json.dumps(fields, separators=(",", ":")).encode()


class Record(NamedTuple):
    """A sessions topic record's value: where the session stuck, when, and whose session it is (None: a record from
    before sessions were scoped by tenant)."""

    instance_id: str
    seen_at: int
    tenant: str | None = None
    snapshot: str | None = None
    snapshot_at: int = 0

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
    snapshot, snapshot_at = data.get("snapshot"), data.get("snapshot_at")
    if snapshot is not None and (not isinstance(snapshot, str) or len(snapshot.encode()) > MAX_SNAPSHOT_BYTES
                                 or isinstance(snapshot_at, bool) or not isinstance(snapshot_at, int)):
        raise ValueError(f"a session snapshot is JSON text of at most {MAX_SNAPSHOT_BYTES} bytes with snapshot_at "
                         "(epoch ms)")
    return Record(instance_id, seen_at, tenant if isinstance(tenant, str) else None,
                  snapshot, snapshot_at if isinstance(snapshot_at, int) and snapshot is not None else 0)


def decode(value: bytes) -> tuple[str, int]:
    """(instance_id, seen_at) of a sessions topic record; ValueError when it is not one."""
    record = decode_record(value)
    return record.instance_id, record.seen_at
