"""`reach cancel MESSAGE_ID`: an operator's cancel record (any tenant) on `<ns>.cancels`."""

from __future__ import annotations

import getpass
import json

import typer

from reach.a2a.cancelsink import KafkaCancels
from reach.cancels import CancelRecord
from reach.cli.common import console, operator_id
from reach.core.audit import operation
from reach.envelopes import now_ms
from reach.kafka import auditlog
from reach.names import Names
from reach.records import AuditKind
from reach.settings import KafkaSettings, ReachSettings


def cancel(
    message_id: str = typer.Argument(..., help="The message_id `reach send` printed."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Cancel a message: an agent that has not started it skips it (CANCELED); a running handler sees
    ctx.cancelled. `reach status MESSAGE_ID` shows the outcome."""
    record = CancelRecord(message_id=message_id, tenant=None, by=f"cli:{getpass.getuser()}", at=now_ms())
    sink = KafkaCancels(topic=Names(ReachSettings().namespace).cancels, kafka=KafkaSettings())
    sink.send(record)
    settings = ReachSettings()
    auditlog.append([operation(AuditKind.CANCEL, message_id, actor=operator_id(settings), at=record.at,
                               after={"cancel": "sent"})], names=Names(settings.namespace), kafka=KafkaSettings())
    if as_json:
        print(json.dumps({"message_id": message_id, "cancel": "sent", "topic": sink.topic}))
    else:
        console.print(f"cancel of {message_id} sent to {sink.topic}; `reach status {message_id}` shows the outcome")
