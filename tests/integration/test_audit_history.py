"""The audit history on the real broker: a drain and a policy change made with the CLI and an agent's version
upgrade appear in `reach audit --json` with actor, before and after; the history outlives the compaction of the
registry topic; a restarted audit writer appends only what is new; the stream app's status role runs the writer;
an instance that goes silent is evicted once, and its return is a state change."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from reach.kafka import clients, codec, topicreader
from reach.names import Names
from reach.records import AgentRegistration, AgentState, Capability
from reach.settings import KafkaSettings
from reach.streams.audit.writer import AuditWriter
from tests.integration.agent_support import reach_cli, wait_for
from tests.integration.stream_app import StreamApp

INSTANCE = "audit-host-1"
AGENT = "agent://test/audited"


def register(names: Names, version: str, *, instance: str = INSTANCE, ttl_ms: int = 60_000,
             partition: int | None = None) -> None:
    """What an agent's heartbeat writes: its registration, keyed by instance id (a ttl long enough that no
    eviction comes into the tests that are not about one)."""
    reg = AgentRegistration(agent_id=AGENT, instance_id=instance, build_version=version, state=AgentState.READY,
                            capabilities=[Capability(name="test.audited", version="1")],
                            heartbeat_at=int(time.time() * 1000), ttl_ms=ttl_ms, inbox_topic=f"{names.namespace}.x")
    producer = clients.producer(KafkaSettings())
    where = {} if partition is None else {"partition": partition}
    producer.produce(names.registry, key=instance.encode(), value=codec.encode(reg), **where)
    assert producer.flush(15) == 0


def audit(*args: str) -> list[dict[str, Any]]:
    out = reach_cli("audit", "--json", *args)
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def registry_versions(names: Names) -> list[str]:
    """Every registration still in the registry topic, oldest first (compaction removes superseded ones)."""
    reader = topicreader.open_reader("audit-test", KafkaSettings())
    try:
        starts = topicreader.start_offsets(reader, names.registry, None)
        return [codec.decode(m.value() or b"", AgentRegistration).build_version
                for m in topicreader.read_range(reader, names.registry, starts, idle_timeout=5)
                if m.value() is not None]
    finally:
        reader.close()


def compact_fast(names: Names) -> None:
    resource = ConfigResource("topic", names.registry)
    for key, value in {"segment.ms": "200", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100",
                       "segment.bytes": "1048576"}.items():
        resource.add_incremental_config(ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET))
    admin = clients.admin(KafkaSettings())  # kept until the answer: a collected client cancels its requests
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_drain_policy_and_upgrade_are_audited_and_outlive_compaction(namespace: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    names = Names(namespace)
    monkeypatch.setenv("REACH_OPERATOR", "ana")
    writer = AuditWriter(names=names, kafka=KafkaSettings())
    writer.start()
    try:
        register(names, "1.0")
        assert reach_cli("agents", "drain", INSTANCE).returncode == 0
        assert reach_cli("policy", "set", "--capability", "test.audited", "--max-attempts", "4").returncode == 0
        register(names, "1.1")
        rows = wait_for(lambda: (lambda r: r if len(r) >= 4 else None)(audit("--since", "10m")), 60,
                        "the join, the drain, the policy change and the upgrade in the audit")
    finally:
        writer.stop()
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["JOIN"]["after"]["build_version"] == "1.0" and by_kind["JOIN"]["actor"] == INSTANCE
    drain = by_kind["INSTANCE"]
    assert (drain["actor"], drain["before"], drain["after"]["instance"]["action"]) == ("reach-cli:ana", None,
                                                                                      "DRAIN")
    policy = by_kind["POLICY"]
    assert (policy["actor"], policy["before"], policy["after"]["policy"]["max_attempts"]) == ("reach-cli:ana",
                                                                                            None, 4)
    version = by_kind["VERSION"]
    assert (version["actor"], version["before"], version["after"], version["agent_id"]) == (INSTANCE, "1.0", "1.1",
                                                                                         AGENT)
    assert [r["kind"] for r in audit("--agent", INSTANCE, "--kind", "version,join")] == ["JOIN", "VERSION"]

    # compaction: the superseded registration (version 1.0) leaves the registry; the audit keeps it
    compact_fast(names)

    def compacted() -> bool:
        register(names, "1.1")  # a heartbeat: new records roll the segment that holds 1.0
        return "1.0" not in registry_versions(names)

    wait_for(compacted, 120, "the registry compacted (no 1.0 registration left)", interval=1.0)
    kept = {r["kind"]: r for r in audit("--agent", INSTANCE)}
    assert kept["VERSION"]["before"] == "1.0" and kept["JOIN"]["after"]["build_version"] == "1.0"

    # a restarted writer resumes at its committed offsets: the heartbeats are no change, 1.2 is the only event
    again = AuditWriter(names=names, kafka=KafkaSettings())
    again.start()
    try:
        register(names, "1.2")
        wait_for(lambda: [r for r in audit("--kind", "version") if r["after"] == "1.2"], 60, "the 1.2 upgrade")
    finally:
        again.stop()
    assert again.appended == 1
    assert len(audit()) == len(rows) + 1


def test_the_status_role_runs_the_audit_writer(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = Names(namespace)
    monkeypatch.setenv("REACH_OPERATOR", "bo")
    app = StreamApp(tmp_path, role="status").start()
    try:
        register(names, "2.0")
        assert reach_cli("agents", "disable", INSTANCE).returncode == 0
        register(names, "2.1")
        rows = wait_for(lambda: (lambda r: r if len(r) >= 3 else None)(audit("--agent", INSTANCE)), 60,
                        "the status role's audit writer appending the join, the disable and the upgrade")
    finally:
        app.stop()
    assert [(r["kind"], r["actor"]) for r in rows] == [("JOIN", INSTANCE), ("INSTANCE", "reach-cli:bo"),
                                                       ("VERSION", INSTANCE)]


def test_a_silent_instance_is_evicted_once_and_its_return_is_a_state_change(namespace: str) -> None:
    names, silent = Names(namespace), "audit-silent-1"
    writer = AuditWriter(names=names, kafka=KafkaSettings())
    writer.start()
    try:
        register(names, "1.0", instance=silent, ttl_ms=1_000)  # then nothing: a crashed host writes no tombstone
        [evicted] = wait_for(lambda: audit("--agent", silent, "--kind", "evicted"), 60, "the eviction")
    finally:
        writer.stop()
    [join] = audit("--agent", silent, "--kind", "join")
    assert (evicted["actor"], evicted["after"]["state"], evicted["before"]["state"]) == ("reach", "OFFLINE", "READY")
    assert evicted["at"] == evicted["before"]["heartbeat_at"] + 2_000 and evicted["agent_id"] == AGENT

    # a restarted writer reads its eviction back: once it has read the partition past the silent instance's
    # heartbeat (a probe's JOIN on the same partition says so), it has appended nothing for it again
    partition = int(join["source"].split("[")[1].split("]")[0])
    again = AuditWriter(names=names, kafka=KafkaSettings())
    again.start()
    try:
        register(names, "1.0", instance="audit-probe-1", partition=partition)
        wait_for(lambda: audit("--agent", "audit-probe-1", "--kind", "join"), 60, "the probe's join")
        assert len(audit("--agent", silent, "--kind", "evicted")) == 1 and again.appended == 1
        register(names, "1.0", instance=silent, ttl_ms=1_000)  # it comes back
        [back] = wait_for(lambda: audit("--agent", silent, "--kind", "state"), 60, "the return")
    finally:
        again.stop()
    assert (back["actor"], back["before"], back["after"]) == (silent, "OFFLINE", "READY")
