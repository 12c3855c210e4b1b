"""`reach dlq ls|show|replay`: inspect dead letters and replay them safely."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

import typer
from rich.markup import escape
from rich.table import Table

from reach import dlq
from reach.cli.common import console, err_console, operator_id
from reach.errors import ConfigError
from reach.names import Names, check_capability
from reach.ops import dlq as ops_dlq
from reach.settings import KafkaSettings, ReachSettings
from reach.timeparse import parse_time

app = typer.Typer(help="Dead letters: list, show, replay.", no_args_is_help=True)


def _filters(capability: str | None, reason: str | None, agent: str | None, since: str | None,
             until: str | None, ids: list[str] | None = None) -> dlq.Filters:
    if capability:
        check_capability(capability)
    filters = dlq.Filters(capability=capability, reason=reason, agent=agent, since_ms=parse_time(since),
                          until_ms=parse_time(until), ids=frozenset(ids or []))
    if filters.since_ms and filters.until_ms and filters.until_ms <= filters.since_ms:
        raise ConfigError("--until must be later than --since.")
    return filters


def _warn(text: str) -> None:
    err_console.print(f"[yellow]{text}[/]")


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


Capability = typer.Option(None, "--capability", help="Only letters of this capability.")
Reason = typer.Option(None, "--reason", help="RETRIES_EXHAUSTED, NO_ROUTE, UNDECODABLE, REJECTED, ...")
Agent = typer.Option(None, "--agent", help="Only letters an agent wrote (agent://...).")
Since = typer.Option(None, "--since", help="ISO time, epoch ms, or an age (15m, 2h, 1d).")
Until = typer.Option(None, "--until", help="Same forms as --since; exclusive.")


@app.command("ls")
def ls(capability: str = Capability, reason: str = Reason, agent: str = Agent, since: str = Since,
       until: str = Until, dead: bool = typer.Option(False, "--dead", help="Only DEAD letters: nobody redrove them "
                                                     "within their POLICY's dead_after (7 days by default)."),
       as_json: bool = typer.Option(False, "--json")) -> None:
    """List dead letters with counts by reason, each with its owner and when it is (or became) DEAD."""
    names, kafka = Names(ReachSettings().namespace), KafkaSettings()
    letters, undecodable = ops_dlq.letters(_filters(capability, reason, agent, since, until), names=names,
                                           kafka=kafka, warn=_warn)
    stand = ops_dlq.standing(letters, names=names, kafka=kafka)
    if dead:
        letters = [item for item in letters if stand[item.id]["dead"]]
    counts = Counter(item.record.reason for item in letters)
    if as_json:
        print(json.dumps({"letters": [{**ops_dlq.summary(i), **stand[i.id]} for i in letters],
                          "counts": dict(counts), "undecodable_records": undecodable}))
        return
    table = Table("id", "message_id", "capability", "reason", "attempts", "gen", "last failure (UTC)", "DEAD",
                  "owner")
    for item in letters:
        rec, row = item.record, stand[item.id]
        table.add_row(item.id, item.message_id or "-", item.capability or "-", rec.reason, str(rec.attempts),
                      str(rec.generation), _when(rec.last_failure_at),
                      "DEAD" if row["dead"] else f"at {_when(row['dead_at'])}", escape(row["owner"] or "-"))
    console.print(table)
    console.print("by reason: " + (", ".join(f"{k}={v}" for k, v in counts.most_common()) or "none")
                  + ("  (`reach dlq show ID` for the error and the envelope)" if letters else ""))
    if undecodable:
        err_console.print(f"[yellow]{undecodable} dead-letter record(s) do not decode[/]")


@app.command()
def show(letter_id: str = typer.Argument(..., help="A letter id (partition:offset) or a message_id."),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """One letter: the decoded envelope, the error, and the message's history."""
    doc = ops_dlq.show(letter_id, settings=ReachSettings(), kafka=KafkaSettings(), warn=_warn)
    if doc is None:
        raise ConfigError(f"No dead letter {letter_id!r}. `reach dlq ls` lists ids (partition:offset).")
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
    settings, kafka = ReachSettings(), KafkaSettings()
    letters, _ = ops_dlq.letters(_filters(capability, reason, agent, since, until, ids),
                                 names=Names(settings.namespace), kafka=kafka, warn=_warn)
    if not letters:
        print(json.dumps(dlq.Summary().as_dict()) if as_json else "No dead letters match; nothing to replay.")
        return
    summary = ops_dlq.replay_letters(letters, settings=settings, kafka=kafka, dry_run=dry_run, rate=rate,
                                     to_capability=to_capability, by=operator_id(settings),
                                     warn=lambda text: err_console.print(f"[red]{text}[/]"))
    if as_json:
        print(json.dumps({**summary.as_dict(), "dry_run": dry_run}))
        return
    verb = "would replay" if dry_run else "replayed"
    console.print(f"{verb} {len(summary.replayed)}, skipped as completed {len(summary.skipped_completed)}, "
                  f"skipped as already replayed {len(summary.skipped_in_progress)}, failed {len(summary.failed)}")
    for mid, why in summary.failed:
        err_console.print(f"  {mid}: {why}")
