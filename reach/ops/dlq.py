"""Dead letters over the bus: list (with the originals of letters written by reference), show, summarise and
replay them (also as a dry run), with the replay ledger and an ACCEPTED receipt per replayed message; the rules
themselves (filters, what a replay skips) are reach.dlq's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from reach import client as sdk
from reach import dlq
from reach.core.audit import AUTOMATIC, operation
from reach.core.lifecycle import StatusRow
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import auditlog, clients, codec, topicreader
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import AuditKind, Envelope, Status
from reach.settings import KafkaSettings, ReachSettings
from reach.webclient import NotFound, auth_headers, get_json

Warn = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def letters(filters: dlq.Filters, *, names: Names, kafka: KafkaSettings,
            warn: Warn = _stderr) -> tuple[list[dlq.Letter], int]:
    """The letters `filters` match, oldest first, and how many records did not decode; a letter written by
    reference carries its original bytes when the origin still has them (`warn` says when it does not)."""
    reader = topicreader.open_reader("dlq", kafka)
    found, undecodable = [], 0
    try:
        starts = topicreader.start_offsets(reader, names.dlq, filters.since_ms)
        for msg in topicreader.read_range(reader, names.dlq, starts, until_ms=filters.until_ms):
            item = dlq.parse(msg.partition() or 0, msg.offset() or 0, msg.timestamp()[1], msg.value() or b"")
            if item is None:
                undecodable += 1
            elif filters.match(item):
                found.append(item)
    finally:
        reader.close()
    return [_original(item, kafka, warn) if item.by_reference else item for item in found], undecodable


def _original(item: dlq.Letter, kafka: KafkaSettings, warn: Warn) -> dlq.Letter:
    """A letter written by reference, with its bytes read back from the origin (unchanged when they are gone)."""
    rec = item.record
    reader = topicreader.open_reader("dlq-origin", kafka)
    try:
        found = topicreader.read_range(reader, rec.origin_topic, {rec.origin_partition: rec.origin_offset},
                                       idle_timeout=10)
        for msg in found:
            if msg.offset() == rec.origin_offset and msg.value():
                return item.with_original(msg.value() or b"")
            break
    except ReachError as exc:
        warn(f"letter {item.id}: its original at {rec.origin_topic}[{rec.origin_partition}]@"
             f"{rec.origin_offset} cannot be read ({exc})")
    finally:
        reader.close()
    return item


def standing(items: list[dlq.Letter], *, names: Names, kafka: KafkaSettings, now: int | None = None
             ) -> dict[str, dict[str, Any]]:
    """Per letter id: when it is (or was) DEAD, whether it is now, and its owner (the POLICY of its capability, the
    replay ledger, the registry and the apps, each read once)."""
    if not items:
        return {}
    from reach.appstore import read_apps
    from reach.control import read_control
    from reach.registry import read_registry

    now = now_ms() if now is None else now
    view, ledger = read_control(names=names, kafka=kafka), dlq.replayed_keys(names, kafka)
    registrations = [i.registration for i in read_registry(kafka, names).instances(now)]
    apps = read_apps(names, kafka)
    out = {}
    for item in items:
        policy = view.policy(item.capability or "*")
        out[item.id] = {"dead_at": dlq.dead_at(item, policy), "dead": dlq.is_dead(item, policy, ledger, now),
                        "owner": dlq.owner_of(item, registrations, apps)}
    return out


def summary(item: dlq.Letter) -> dict[str, Any]:
    """A letter's provenance and error, without its envelope."""
    rec = item.record
    return {"id": item.id, "message_id": item.message_id, "capability": item.capability, "reason": rec.reason,
            "error": rec.error.model_dump() if rec.error else None, "attempts": rec.attempts,
            "generation": rec.generation, "agent_id": rec.agent_id, "first_failure_at": rec.first_failure_at,
            "last_failure_at": rec.last_failure_at,
            "origin": {"topic": rec.origin_topic, "partition": rec.origin_partition, "offset": rec.origin_offset}}


def contents(item: dlq.Letter) -> dict[str, Any]:
    """The letter's decoded envelope (without the payload bytes) and its payload as text; None when undecodable."""
    envelope = item.envelope
    return {"envelope": envelope.model_dump(mode="json", exclude={"payload"}) if envelope else None,
            "payload": envelope.payload.decode("utf-8", "replace") if envelope else None}


def local_views(settings: ReachSettings) -> str:
    """This host's stream-app views (the default of `status_row`'s `base`)."""
    return f"http://127.0.0.1:{settings.web_port}"


def status_row(message_id: str, *, settings: ReachSettings, base: str | None = None) -> StatusRow | None:
    """The message's status row from the stream app's views at `base` (default: this host's), None if unknown."""
    try:
        return StatusRow.model_validate(get_json(base or local_views(settings),
                                                 f"/messages/{quote(message_id, safe='')}",
                                                 auth=auth_headers(settings)))
    except NotFound:
        return None


def show(letter_id: str, *, settings: ReachSettings, kafka: KafkaSettings,
         warn: Warn = _stderr) -> dict[str, Any] | None:
    """One letter (by letter id or message_id; the newest if several): its summary, envelope, payload and the
    message's history (None when the status views do not answer); None when there is no such letter."""
    found, _ = letters(dlq.Filters(ids=frozenset([letter_id])), names=Names(settings.namespace), kafka=kafka,
                       warn=warn)
    if not found:
        return None
    item = found[-1]
    history = None
    try:
        row = status_row(item.message_id, settings=settings) if item.message_id else None
        history = row.model_dump(mode="json") if row else None
    except ReachError:  # the history is a bonus; the letter itself is what was asked for
        pass
    return {**summary(item), **contents(item), "history": history}


def replay_letters(items: list[dlq.Letter], *, settings: ReachSettings, kafka: KafkaSettings, dry_run: bool,
                   rate: float | None, to_capability: str | None = None,
                   lookup: Callable[[str], StatusRow | None] | None = None, warn: Warn = _stderr,
                   by: str = AUTOMATIC) -> dlq.Summary:
    """reach.dlq.replay over the real bus: publish + ACCEPTED receipt, then the ledger and a REDRIVE audit event by
    `by` (`reach dlq replay` and the console's redrive)."""
    names = Names(settings.namespace)
    producer = clients.producer(kafka, profile="hot")
    client = sdk.Client(kafka=kafka, settings=settings)

    def publish(envelope: Envelope) -> None:
        client.publish(envelope)
        accepted = receipt_for(envelope, Status.ACCEPTED)
        producer.produce(names.receipts, codec.encode(accepted), key=envelope.message_id.encode())

    def record(item: dlq.Letter) -> None:
        key, value = dlq.ledger_entry(item, now=now_ms())
        producer.produce(names.replays, value, key=key.encode())
        redrive = operation(AuditKind.REDRIVE, item.message_id or key, actor=by, at=now_ms(),
                            after={"letter": item.id, "to_capability": to_capability})
        auditlog.append([redrive], names=names, kafka=kafka, producer=producer)

    try:
        done = dlq.replay(items, lookup=lookup or (lambda mid: status_row(mid, settings=settings)), publish=publish,
                          dry_run=dry_run, rate=rate,
                          to_capability=to_capability, ledger=dlq.replayed_keys(names, kafka), record=record)
    finally:
        if producer.flush(30):
            warn("some replayed records were not acknowledged by the broker; run the replay again (replayed "
                 "letters are skipped)")
        client.close()
    return done
