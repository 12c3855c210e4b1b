"""`reach audit` end to end on the in-memory bus: the audit writer appends the changes of the registry and the
control topic, the listing filters them, a restarted writer appends nothing twice; a bad time range or kind is a
usage error (exit 2) before anything is read."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reach import analytics
from reach.cli import app
from reach.cli.common import run_guarded
from reach.errors import ConfigError
from reach.kafka import clients, codec, memory
from reach.names import Names
from reach.ops import audit as ops_audit
from reach.records import (
    AgentRegistration,
    AgentState,
    Control,
    ControlKind,
    InstanceAction,
    InstanceOverride,
    Policy,
)
from reach.settings import KafkaSettings
from reach.streams.audit.writer import AuditWriter

NAMES = Names("aud")


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"unit-{uuid.uuid4().hex[:8]}"
    bus = memory.bus(name)
    for topic in (NAMES.registry, NAMES.control, NAMES.health, NAMES.apps, NAMES.audit):
        bus.create_topic(topic, 1)
    yield KafkaSettings(bootstrap=memory.SCHEME + name)
    memory.forget(name)


def put(kafka: KafkaSettings, *records: tuple[str, str, Any]) -> None:
    producer = clients.producer(kafka)
    for topic, key, record in records:
        producer.produce(topic, key=key.encode(), value=codec.encode(record) if record is not None else None)
    assert producer.flush(5) == 0


def reg(version: str, beat: int) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://a/b", instance_id="i-1", build_version=version, state=AgentState.READY,
                             heartbeat_at=beat, ttl_ms=10_000, inbox_topic="aud.agent.a.b")


def wait_rows(kafka: KafkaSettings, count: int, **filters: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        rows = ops_audit.history(names=NAMES, kafka=kafka, **filters)
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_the_writer_appends_each_change_once_across_a_restart(kafka: KafkaSettings) -> None:
    now = int(time.time() * 1000)
    drain = Control(kind=ControlKind.INSTANCE, scope="i-1", updated_at=now + 3, updated_by="reach-cli:ana",
                    instance=InstanceOverride(instance_id="i-1", action=InstanceAction.DRAIN))
    put(kafka, (NAMES.registry, "i-1", reg("1.0", now)), (NAMES.registry, "i-1", reg("1.0", now + 1)),
        (NAMES.registry, "i-1", reg("1.1", now + 2)), (NAMES.control, "INSTANCE:i-1", drain))
    writer = AuditWriter(names=NAMES, kafka=kafka)
    writer.start()
    try:
        rows = wait_rows(kafka, 3)
    finally:
        writer.stop()
    assert [(r["kind"], r["actor"], r["before"], r["after"]) for r in rows[1:]] == [
        ("VERSION", "i-1", "1.0", "1.1"),
        ("INSTANCE", "reach-cli:ana", None, {"instance": {"action": "DRAIN", "instance_id": "i-1"}})]
    assert rows[0]["kind"] == "JOIN" and rows[0]["agent_id"] == "agent://a/b"
    policy = Control(kind=ControlKind.POLICY, scope="*", policy=Policy(max_attempts=4), updated_at=now + 5,
                     updated_by="console:bo")
    put(kafka, (NAMES.control, "POLICY:*", policy))
    again = AuditWriter(names=NAMES, kafka=kafka)  # resumes from the committed offsets
    again.start()
    try:
        rows = wait_rows(kafka, 4)
    finally:
        again.stop()
    assert [r["kind"] for r in rows] == ["JOIN", "VERSION", "INSTANCE", "POLICY"]
    assert again.appended == 1
    assert [r["kind"] for r in ops_audit.history(names=NAMES, kafka=kafka, agent="i-1")] == [
        "JOIN", "VERSION", "INSTANCE"]
    assert [r["actor"] for r in ops_audit.history(names=NAMES, kafka=kafka, kinds=["policy"], since="1h")] == [
        "console:bo"]


def test_the_cli_lists_and_queries_the_history(kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_BOOTSTRAP", kafka.bootstrap or "")
    monkeypatch.setenv("REACH_NAMESPACE", NAMES.namespace)
    now = int(time.time() * 1000)
    put(kafka, (NAMES.registry, "i-1", reg("1.0", now)), (NAMES.registry, "i-1", reg("1.1", now + 1)))
    writer = AuditWriter(names=NAMES, kafka=kafka)
    writer.start()
    try:
        wait_rows(kafka, 2)
    finally:
        writer.stop()
    listed = CliRunner().invoke(app, ["audit", "--json", "--kind", "version"])
    assert listed.exit_code == 0, listed.output
    assert [(r["before"], r["after"]) for r in json.loads(listed.output)] == [("1.0", "1.1")]
    table = CliRunner().invoke(app, ["audit", "--agent", "i-1"])
    assert table.exit_code == 0 and "VERSION" in table.output and "JOIN" in table.output
    queried = CliRunner().invoke(app, ["audit", "sql", "SELECT kind, after ->> '$' AS v FROM audit ORDER BY ts",
                                       "--format", "json"])
    assert queried.exit_code == 0, queried.output
    assert [row["kind"] for row in json.loads(queried.output)] == ["JOIN", "VERSION"]
    assert json.loads(queried.output)[1]["v"] == "1.1"


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "soon"], "is not understood"),
    (["--since", "2999-01-01T00:00:00"], "--since is in the future"),
    (["--since", "1h", "--until", "2h"], "--until must be later than --since"),
    (["--kind", "nope"], "is not an audit kind"),
])
def test_a_bad_query_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                      args: list[str], message: str) -> None:
    monkeypatch.setattr(ops_audit, "read_events", lambda **_kw: pytest.fail("nothing is read for a bad query"))
    with pytest.raises(ConfigError, match=message.replace("-", r"\-")):
        ops_audit.history(names=NAMES, kafka=KafkaSettings(), since=args[1] if args[0] == "--since" else None,
                          until=args[3] if len(args) > 3 else None, kinds=[args[1]] if args[0] == "--kind" else None)
    monkeypatch.setattr(sys, "argv", ["reach", "audit", *args])
    assert run_guarded(app) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")


@pytest.mark.parametrize("name", ["audit_by_actor.sql", "audit_versions.sql", "audit_operator_changes.sql"])
def test_the_ready_audit_queries_run(tmp_path: Path, name: str) -> None:
    from reach.core.audit import AuditBook

    book = AuditBook()
    events = [*book.registration("i-1", reg("1.0", 1), ts_ms=1, source=""),
              *book.registration("i-1", reg("1.1", 2), ts_ms=2, source=""),
              *book.control("POLICY:*", Control(kind=ControlKind.POLICY, policy=Policy(max_attempts=3), updated_at=3,
                                                updated_by="reach-cli:ana"), ts_ms=3, source="")]
    stats = analytics.LoadStats()
    con = analytics.load_table(ops_audit.sql_rows(iter(events), stats), tmp_path, table="audit",
                               columns=ops_audit.SQL_COLUMNS)
    sql = (Path(__file__).resolve().parents[3] / "docs" / "queries" / name).read_text()
    columns, rows = analytics.query(con, sql, view="audit", command="reach audit sql")
    assert stats.rows == 3 and rows
    if name == "audit_versions.sql":
        assert [(r[columns.index("from_version")], r[columns.index("to_version")]) for r in rows] == [("1.0", "1.1")]
    if name == "audit_operator_changes.sql":
        assert [r[columns.index("actor")] for r in rows] == ["reach-cli:ana"]
