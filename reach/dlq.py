"""Dead letters: writing them with provenance, reading and filtering them, and replaying them safely.

Replay is safe to run twice for as long as letters live: each replay of a letter (message_id,
generation) is recorded in the compacted `<ns>.replays` ledger after its envelope is published, and a
letter found there is skipped, whatever the status table (whose rows expire sooner) still holds.
A letter with an empty envelope was written by reference (the original was over the dlq limit):
its bytes are read back from the origin topic/partition/offset.

A letter nobody redrives is DEAD once it is older than its capability's POLICY `dead_after_ms` (7 days by default):
`reach dlq ls --dead` lists those, and the dead-letter warden (reach/streams/dlqwarden.py) tells the owner of
its agent (AgentRegistration `owner`, a channel target) once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.callers import GATEWAY_SOURCE
from reach.core.lifecycle import StatusRow
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import codec, headers
from reach.kafka.codec import DecodeError
from reach.names import Names
from reach.records import AgentRegistration, App, DeadLetter, Envelope, ErrorInfo, Policy, Status
from reach.settings import KafkaSettings

RETRIES_EXHAUSTED = "RETRIES_EXHAUSTED"
NO_ROUTE = "NO_ROUTE"
UNDECODABLE = "UNDECODABLE"
UNKNOWN_SCHEMA = "UNKNOWN_SCHEMA"
REJECTED = "REJECTED"


def provenance(topic: str, partition: int, offset: int, reason: str,
               message_id: str | None = None) -> headers.Headers:
    """The `x-reach-origin-*` headers every dead letter carries."""
    out: headers.Headers = [(headers.ORIGIN_TOPIC, topic.encode()), (headers.ORIGIN_PARTITION, str(partition).encode()),
           (headers.ORIGIN_OFFSET, str(offset).encode()), (headers.REASON, reason.encode())]
    if message_id:
        out.append((headers.MESSAGE_ID, message_id.encode()))
    return out


def letter(raw: bytes, *, reason: str, error: ErrorInfo | None, origin: tuple[str, int, int],
           envelope: Envelope | None = None, agent_id: str | None = None, message_id: str | None = None,
           first_failure_at: int | None = None) -> tuple[bytes, headers.Headers]:
    """An encoded DeadLetter (original bytes untouched) and its provenance headers."""
    now = now_ms()
    topic, partition, offset = origin
    record = DeadLetter(
        envelope=raw, reason=reason, error=error,
        attempts=envelope.attempt if envelope else 0, generation=envelope.generation if envelope else 0,
        message_id=envelope.message_id if envelope else message_id,
        capability=envelope.capability if envelope else None, agent_id=agent_id,
        first_failure_at=first_failure_at or (envelope.created_at if envelope else now), last_failure_at=now,
        origin_topic=topic, origin_partition=partition, origin_offset=offset,
    )
    return codec.encode(record), provenance(topic, partition, offset, reason, record.message_id)


@dataclass(frozen=True)
class Letter:
    """One record of the dead-letter topic, with its id (`partition:offset`) and the decoded envelope."""

    id: str
    record: DeadLetter
    timestamp: int
    envelope: Envelope | None  # None when the original bytes do not decode

    @property
    def message_id(self) -> str | None:
        return self.record.message_id or (self.envelope.message_id if self.envelope else None)

    @property
    def capability(self) -> str | None:
        return self.record.capability or (self.envelope.capability if self.envelope else None)

    @property
    def by_reference(self) -> bool:
        """The original bytes were not copied (too large): they live at the origin offset."""
        return not self.record.envelope and bool(self.record.origin_topic) and self.record.origin_offset >= 0

    def with_original(self, raw: bytes) -> Letter:
        """This letter with the bytes read back from its origin."""
        return Letter(self.id, self.record.model_copy(update={"envelope": raw}), self.timestamp, _envelope_of(raw))


def _envelope_of(raw: bytes) -> Envelope | None:
    try:
        return codec.decode(raw, Envelope)
    except DecodeError:
        return None


def parse(partition: int, offset: int, timestamp: int, value: bytes) -> Letter | None:
    """A Letter, or None when the dead-letter record itself does not decode."""
    try:
        record = codec.decode(value, DeadLetter)
    except DecodeError:
        return None
    return Letter(f"{partition}:{offset}", record, timestamp, _envelope_of(record.envelope))


DEFAULT_DEAD_AFTER_MS = 7 * 24 * 3600 * 1000


def dead_at(item: Letter, policy: Policy) -> int:
    """When the letter is DEAD if nobody redrives it (epoch ms): its last failure plus the POLICY's dead_after."""
    after = policy.dead_after_ms if policy.dead_after_ms and policy.dead_after_ms > 0 else DEFAULT_DEAD_AFTER_MS
    return item.record.last_failure_at + after


def is_dead(item: Letter, policy: Policy, ledger: Collection[str], now: int) -> bool:
    """Past its dead_after and never replayed."""
    key = ledger_key(item.message_id or item.id, item.record.generation)
    return now >= dead_at(item, policy) and key not in ledger


def owner_of(item: Letter, registrations: Iterable[AgentRegistration],
             apps: Mapping[str, App] | None = None) -> str | None:
    """Who answers for the letter: the owner of the agent that wrote it, else of an agent serving its capability,
    else (a NO_ROUTE letter: no agent has it) of the gateway app that sent it."""
    by_agent: str | None = None
    by_capability: str | None = None
    for reg in registrations:
        if not reg.owner:
            continue
        if item.record.agent_id and reg.agent_id == item.record.agent_id:
            by_agent = by_agent or reg.owner
        elif item.capability and any(c.name == item.capability for c in reg.capabilities):
            by_capability = by_capability or reg.owner
    return by_agent or by_capability or sender_owner(item.envelope, apps or {})


def app_owners(apps: Iterable[App], *, capability: str, tenants: Collection[str]) -> list[str]:
    """The owners of the live apps of these tenants that may call `capability`: whom a stale NO_ROUTE letter
    concerns (nobody serves the capability, so no agent owns it; the status row knows the tenant, not the app)."""
    return sorted({a.owner for a in apps if a.owner and a.role is None and not a.revoked and a.tenant in tenants
                   and (not a.capabilities or capability in a.capabilities)})


def sender_owner(envelope: Envelope | None, apps: Mapping[str, App]) -> str | None:
    """The owner of the gateway app that sent `envelope` (its `source` is `gateway:<app_id>`, stamped by the
    gateway, never taken from a body), if it names one."""
    if envelope is None or not envelope.source.startswith(GATEWAY_SOURCE):
        return None
    app = apps.get(envelope.source.removeprefix(GATEWAY_SOURCE))
    return app.owner if app is not None else None


def ledger_key(message_id: str, generation: int) -> str:
    """The replay ledger's key of a letter: `<message_id>:<generation>` (the generation that died)."""
    return f"{message_id}:{generation}"


def replayed_keys(names: Names, kafka: KafkaSettings) -> set[str]:
    """Keys of the letters already replayed (the compacted `<ns>.replays` ledger read to its end); ReachError when
    it cannot be read (never read as empty: a letter would be replayed, or called DEAD, twice)."""
    from reach.kafka import topicreader

    reader = topicreader.open_reader("replays", kafka)
    try:
        starts = topicreader.start_offsets(reader, names.replays, None)
        return {(msg.key() or b"").decode(errors="replace")
                for msg in topicreader.read_range(reader, names.replays, starts) if msg.value() is not None}
    finally:
        reader.close()


def ledger_entry(item: Letter, *, now: int) -> tuple[str, bytes]:
    """Key and value of the ledger record saying this letter was replayed (into generation + 1)."""
    mid = item.message_id or item.id
    value = {"message_id": mid, "generation": item.record.generation, "replayed_generation": item.record.generation + 1,
             "letter": item.id, "replayed_at": now}
    return ledger_key(mid, item.record.generation), json.dumps(value).encode()


@dataclass(frozen=True)
class Filters:
    """What `reach dlq ls|replay` selects; empty means everything."""

    capability: str | None = None
    reason: str | None = None
    agent: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    ids: frozenset[str] = frozenset()

    def match(self, item: Letter) -> bool:
        rec = item.record
        return (
            (not self.capability or item.capability == self.capability)
            and (not self.reason or rec.reason == self.reason)
            and (not self.agent or rec.agent_id == self.agent)
            and (self.since_ms is None or item.timestamp >= self.since_ms)
            and (self.until_ms is None or item.timestamp < self.until_ms)
            and (not self.ids or item.id in self.ids or item.message_id in self.ids)
        )


def latest_per_message(letters: Iterable[Letter]) -> list[Letter]:
    """One letter per message: the newest generation's (a message can die again after a replay)."""
    best: dict[str, Letter] = {}
    loose: list[Letter] = []
    for item in letters:
        key = item.message_id
        if key is None:
            loose.append(item)
        elif key not in best or item.record.generation >= best[key].record.generation:
            best[key] = item
    return [*best.values(), *loose]


def replayed(envelope: Envelope, generation: int, *, now: int, to_capability: str | None = None) -> Envelope:
    """Same message_id, trace_id and idempotency_key; attempt 1; next generation; the original budget from now."""
    budget = max(1, envelope.deadline - envelope.created_at)
    return envelope.model_copy(update={
        "attempt": 1, "generation": generation + 1, "reroutes": 0, "excluded_instances": [],
        "created_at": now, "deadline": now + budget,
        "expire_at": None if envelope.expire_at is None or envelope.expire_at < now else envelope.expire_at,
        "capability": to_capability or envelope.capability,
    })


class ReplayRefused(ReachError):
    """A letter cannot be replayed (undecodable envelope)."""


@dataclass
class Summary:
    """What a replay did."""

    replayed: list[str] = field(default_factory=list)
    skipped_completed: list[str] = field(default_factory=list)
    skipped_in_progress: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"replayed": len(self.replayed), "skipped_completed": len(self.skipped_completed),
                "skipped_in_progress": len(self.skipped_in_progress), "failed": len(self.failed),
                "replayed_ids": self.replayed, "failures": [{"id": i, "reason": r} for i, r in self.failed]}


def decide(item: Letter, row: StatusRow | None, ledger: Collection[str] = frozenset()) -> str:
    """`replay`, `completed` (the row is COMPLETED), `in_progress` (the ledger or a newer generation says it was
    replayed already) or `refused`."""
    if item.envelope is None:
        return "refused"
    if row is not None and row.status is Status.COMPLETED:
        return "completed"
    if item.message_id and ledger_key(item.message_id, item.record.generation) in ledger:
        return "in_progress"  # replayed before, whether or not its status row still exists
    if row is not None and row.generation > item.record.generation:
        return "in_progress"  # already replayed: running the same replay twice executes nothing twice
    return "replay"


def replay(letters: list[Letter], *, lookup: Callable[[str], StatusRow | None],
           publish: Callable[[Envelope], None], dry_run: bool, rate: float | None,
           to_capability: str | None = None, sleep: Callable[[float], None] = time.sleep,
           ledger: Collection[str] = frozenset(), record: Callable[[Letter], None] = lambda _l: None) -> Summary:
    """Replay the letters not yet completed or replayed; `publish` sends the envelope and its ACCEPTED receipt,
    then `record` writes the letter into the ledger (in that order: a crash between replays once more, never
    loses the replay)."""
    summary = Summary()
    interval = 1.0 / rate if rate else 0.0
    for item in latest_per_message(letters):
        mid = item.message_id or item.id
        verdict = decide(item, lookup(item.message_id) if item.message_id else None, ledger)
        if verdict == "completed":
            summary.skipped_completed.append(mid)
        elif verdict == "in_progress":
            summary.skipped_in_progress.append(mid)
        elif verdict == "refused" or item.envelope is None:
            summary.failed.append((mid, "the original envelope does not decode; it cannot be replayed"))
        else:
            if not dry_run:
                publish(replayed(item.envelope, item.record.generation, now=now_ms(), to_capability=to_capability))
                record(item)
                if interval:
                    sleep(interval)
            summary.replayed.append(mid)
    return summary
