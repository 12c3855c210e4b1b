"""The audit history: `reach audit` (and any other front end) lists the events of `<ns>.audit` through here.

The events are appended by the audit writer (reach.streams.audit); this reads the time range asked for (offsets
looked up by timestamp: an event is appended after it happened, so no event of the range is before its start)
and filters it with reach.core.audit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from reach.core.audit import BadAuditQuery, actor_source, check_range, matches, parse_kinds
from reach.envelopes import now_ms
from reach.errors import ConfigError
from reach.kafka.auditlog import read_events
from reach.names import Names
from reach.records import AuditEvent
from reach.settings import KafkaSettings
from reach.timeparse import parse_time


def row(event: AuditEvent) -> dict[str, Any]:
    """One event as plain values; before and after parsed back from their JSON."""
    return {"at": event.at, "kind": str(event.kind), "subject": event.subject, "agent_id": event.agent_id,
            "instance_id": event.instance_id, "actor": event.actor, "actor_source": actor_source(event.actor),
            "before": json.loads(event.before) if event.before is not None else None,
            "after": json.loads(event.after) if event.after is not None else None, "source": event.source}


def history(*, names: Names, kafka: KafkaSettings, agent: str | None = None, since: str | None = None,
            until: str | None = None, kinds: list[str] | None = None, now: int | None = None) -> list[dict[str, Any]]:
    """The audit events matching the filters, oldest first (by when they happened: the writer appends the
    changes of different topics in no particular order between them), as rows; ConfigError (exit 2) for a bad
    time range or kind, before anything is read."""
    now = now if now is not None else now_ms()
    since_ms, until_ms = parse_time(since, now_ms=now), parse_time(until, now_ms=now)
    try:
        wanted = parse_kinds(kinds or [])
        check_range(since_ms, until_ms, now)
    except BadAuditQuery as exc:
        raise ConfigError(str(exc)) from None
    events = read_events(names=names, kafka=kafka, since_ms=since_ms, until_ms=until_ms)
    chosen = [e for e in events if matches(e, agent=agent, kinds=wanted, since_ms=since_ms, until_ms=until_ms)]
    return [row(e) for e in sorted(chosen, key=lambda e: e.at)]


# `reach audit sql`: one column per field, `at` as `ts` (AT is reserved in SQL); before/after as JSON.
SQL_COLUMNS: dict[str, str] = {
    "ts": "TIMESTAMP", "kind": "VARCHAR", "subject": "VARCHAR", "agent_id": "VARCHAR", "instance_id": "VARCHAR",
    "actor": "VARCHAR", "actor_source": "VARCHAR", "before": "JSON", "after": "JSON", "source": "VARCHAR",
}


def sql_rows(events: Iterator[AuditEvent], stats: Any) -> Iterator[dict[str, Any]]:
    """Events as flat rows of SQL_COLUMNS (`stats.rows` counts them)."""
    for event in events:
        stats.rows += 1
        yield {"ts": event.at, "kind": str(event.kind), "subject": event.subject, "agent_id": event.agent_id,
               "instance_id": event.instance_id, "actor": event.actor, "actor_source": actor_source(event.actor),
               "before": json.loads(event.before) if event.before is not None else None,
               "after": json.loads(event.after) if event.after is not None else None, "source": event.source}
