"""`reach dlq ls|show|replay`: inspect dead letters and replay them safely."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import typer
from rich.table import Table

from reach import clients, codec, dlq, topicreader
from reach.cli.common import console, err_console
from reach.cli.timeparse import parse_time
from reach.client import Client
from reach.core.status import StatusRow
from reach.envelopes import now_ms
from reach.errors import ConfigError, ReachError
from reach.names import Names, check_capability
from reach.receipts import receipt_for
from reach.records import Envelope, Status
from reach.settings import ReachSettings
from reach.webclient import NotFound, get_json

app = typer.Typer(help="Dead letters: list, show, replay.", no_args_is_help=True)


def _names() -> Names:
    return Names(ReachSettings().namespace)


def _filters(capability: str | None, reason: str | None, agent: str | None, since: str | None,
             until: str | None, ids: list[str] | None = None) -> dlq.Filters:
    if capability:
        check_capability(capability)
    filters = dlq.Filters(capability=capability, reason=reason, agent=agent, since_ms=parse_time(since),
                          until_ms=parse_time(until), ids=frozenset(ids or []))
    if filters.since_ms and filters.until_ms and filters.until_ms <= filters.since_ms:
        raise ConfigError("--until must be later than --since.")
    return filters


def _letters(filters: dlq.Filters) -> tuple[list[dlq.Letter], int]:
    names = _names()
    reader = topicreader.open_reader("dlq")
    letters, undecodable = [], 0
    try:
        starts = topicreader.start_offsets(reader, names.dlq, filters.since_ms)
        for msg in topicreader.read_range(reader, names.dlq, starts, until_ms=filters.until_ms):
            item = dlq.parse(msg.partition() or 0, msg.offset() or 0, msg.timestamp()[1], msg.value() or b"")
            if item is None:
                undecodable += 1
            elif filters.match(item):
                letters.append(item)
    finally:
        reader.close()
    return [_original(item) if item.by_reference else item for item in letters], undecodable


def _original(item: dlq.Letter) -> dlq.Letter:
    """A letter written by reference, with its bytes read back from the origin (unchanged when they are gone)."""
    rec = item.record
    reader = topicreader.open_reader("dlq-origin")
    try:
        found = topicreader.read_range(reader, rec.origin_topic, {rec.origin_partition: rec.origin_offset},
                                       idle_timeout=10)
        for msg in found:
            if msg.offset() == rec.origin_offset and msg.value():
                return item.with_original(msg.value() or b"")
            break
    except ReachError as exc:
        err_console.print(f"[yellow]letter {item.id}: its original at {rec.origin_topic}[{rec.origin_partition}]@"
                          f"{rec.origin_offset} cannot be read ({exc})[/]")
    finally:
        reader.close()
    return item


def _ledger() -> set[str]:
    """Keys of the letters already replayed (the compacted replay ledger)."""
    names = _names()
    reader = topicreader.open_reader("replays")
    try:
        starts = topicreader.start_offsets(reader, names.replays, None)
        return {(msg.key() or b"").decode(errors="replace")
                for msg in topicreader.read_range(reader, names.replays, starts) if msg.value() is not None}
    finally:
        reader.close()


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _summary(item: dlq.Letter) -> dict[str, Any]:
    rec = item.record
    return {"id": item.id, "message_id": item.message_id, "capability": item.capability, "reason": rec.reason,
            "error": rec.error.model_dump() if rec.error else None, "attempts": rec.attempts,
            "generation": rec.generation, "agent_id": rec.agent_id, "first_failure_at": rec.first_failure_at,
            "last_failure_at": rec.last_failure_at,
            "origin": {"topic": rec.origin_topic, "partition": rec.origin_partition, "offset": rec.origin_offset}}


Capability = typer.Option(None, "--capability", help="Only letters of this capability.")
Reason = typer.Option(None, "--reason", help="RETRIES_EXHAUSTED, NO_ROUTE, UNDECODABLE, REJECTED, ...")
Agent = typer.Option(None, "--agent", help="Only letters an agent wrote (agent://...).")
Since = typer.Option(None, "--since", help="ISO time, epoch ms, or an age (15m, 2h, 1d).")
Until = typer.Option(None, "--until", help="Same forms as --since; exclusive.")


@app.command("ls")
def ls(capability: str = Capability, reason: str = Reason, agent: str = Agent, since: str = Since,
       until: str = Until, as_json: bool = typer.Option(False, "--json")) -> None:
    """List dead letters with counts by reason."""
    letters, undecodable = _letters(_filters(capability, reason, agent, since, until))
    counts = Counter(item.record.reason for item in letters)
    if as_json:
        print(json.dumps({"letters": [_summary(i) for i in letters], "counts": dict(counts),
                          "undecodable_records": undecodable}))
        return
    table = Table("id", "message_id", "capability", "reason", "attempts", "gen", "last failure (UTC)")
    for item in letters:
        rec = item.record
        table.add_row(item.id, item.message_id or "-", item.capability or "-", rec.reason, str(rec.attempts),
                      str(rec.generation), _when(rec.last_failure_at))
    console.print(table)
    console.print("by reason: " + (", ".join(f"{k}={v}" for k, v in counts.most_common()) or "none")
                  + ("  (`reach dlq show ID` for the error and the envelope)" if letters else ""))
    if undecodable:
        err_console.print(f"[yellow]{undecodable} dead-letter record(s) do not decode[/]")


def _row(message_id: str, base: str | None = None) -> StatusRow | None:
    try:
        return StatusRow.model_validate(get_json(base or f"http://127.0.0.1:{ReachSettings().web_port}",
                                                 f"/messages/{quote(message_id, safe='')}"))
    except NotFound:
        return None


@app.command()
def show(letter_id: str = typer.Argument(..., help="A letter id (partition:offset) or a message_id."),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """One letter: the decoded envelope, the error, and the message's history."""
    letters, _ = _letters(dlq.Filters(ids=frozenset([letter_id])))
    if not letters:
        raise ConfigError(f"No dead letter {letter_id!r}. `reach dlq ls` lists ids (partition:offset).")
    item = letters[-1]
    envelope = item.envelope.model_dump(mode="json", exclude={"payload"}) if item.envelope else None
    payload = item.envelope.payload.decode("utf-8", "replace") if item.envelope else None
    history = None
    try:
        row = _row(item.message_id) if item.message_id else None
        history = row.model_dump(mode="json") if row else None
    except ReachError:  # the history is a bonus; the letter itself is what was asked for
        pass
    doc = {**_summary(item), "envelope": envelope, "payload": payload, "history": history}
    if as_json:
        print(json.dumps(doc))
        return
    console.print_json(json.dumps(doc))


@app.command()
def replay(capability: str = Capability, reason: str = Reason, agent: str = Agent, since: str = Since,
           until: str = Until, ids: list[str] = typer.Option(None, "--id", help="Letter id or message_id."),
           dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be replayed; change nothing."),
           rate: float = typer.Option(None, "--rate", help="At most this many messages per second."),
           to_capability: str = typer.Option(None, "--to-capability", help="Send to another capability."),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Replay letters: same ids, attempt 1, next generation, fresh budget; COMPLETED ones are skipped."""
    if rate is not None and rate <= 0:
        raise ConfigError("--rate must be > 0 messages per second.")
    if to_capability:
        check_capability(to_capability)
    letters, _ = _letters(_filters(capability, reason, agent, since, until, ids))
    if not letters:
        print(json.dumps(dlq.Summary().as_dict()) if as_json else "No dead letters match; nothing to replay.")
        return
    summary = replay_letters(letters, dry_run=dry_run, rate=rate, to_capability=to_capability)
    if as_json:
        print(json.dumps({**summary.as_dict(), "dry_run": dry_run}))
        return
    verb = "would replay" if dry_run else "replayed"
    console.print(f"{verb} {len(summary.replayed)}, skipped as completed {len(summary.skipped_completed)}, "
                  f"skipped as already replayed {len(summary.skipped_in_progress)}, failed {len(summary.failed)}")
    for mid, why in summary.failed:
        err_console.print(f"  {mid}: {why}")


def replay_letters(letters: list[dlq.Letter], *, dry_run: bool, rate: float | None,
                   to_capability: str | None = None,
                   lookup: Callable[[str], StatusRow | None] | None = None) -> dlq.Summary:
    """reach.dlq.replay over the real bus: publish + ACCEPTED receipt, then the ledger (also the console's redrive)."""
    names = _names()
    producer = clients.producer()
    client = Client()

    def publish(envelope: Envelope) -> None:
        client.publish(envelope)
        accepted = receipt_for(envelope, Status.ACCEPTED)
        producer.produce(names.receipts, codec.encode(accepted), key=envelope.message_id.encode())

    def record(item: dlq.Letter) -> None:
        key, value = dlq.ledger_entry(item, now=now_ms())
        producer.produce(names.replays, value, key=key.encode())

    try:
        summary = dlq.replay(letters, lookup=lookup or _row, publish=publish, dry_run=dry_run, rate=rate,
                             to_capability=to_capability, ledger=_ledger(), record=record)
    finally:
        if producer.flush(30):
            err_console.print("[red]some replayed records were not acknowledged by the broker; run the replay "
                              "again (replayed letters are skipped)[/]")
        client.close()
    return summary
