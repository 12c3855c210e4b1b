"""Registration lifecycle: STARTING -> READY -> DRAINING -> tombstone; silence shows OFFLINE; bad input."""

from __future__ import annotations

import json
import signal
from typing import Any

from reach.agent import Agent
from reach.client import Client
from reach.envelopes import new_id, now_ms
from reach.kafka import codec
from reach.kafka import headers as h
from reach.names import Names
from reach.records import AgentRegistration, AgentState, DeadLetter, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import (
    Receipts,
    TopicReader,
    inbox_partitions,
    reach_cli,
    running,
    spawn,
    wait_for,
)


def _echo(ttl_ms: int = 3000) -> Agent:
    agent = Agent("agent://test/life", ttl_ms=ttl_ms, max_concurrency=2, drain_grace_s=10)

    @agent.capability("test.life", version="1.0.0", input_schema={"type": "object"})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


def _states(reader: TopicReader, instance_id: str) -> list[AgentState | None]:
    out: list[AgentState | None] = []
    for rec in reader.poll():
        if rec.key == instance_id.encode():
            out.append(None if rec.value is None else codec.decode(rec.value, AgentRegistration).state)
    return out


def test_clean_shutdown_goes_draining_then_tombstone(namespace: str) -> None:
    names = Names(namespace)
    agent = _echo()
    registry = TopicReader(names.registry)
    with running(agent):
        wait_for(lambda: AgentState.READY in _states(registry, agent.instance_id), 30, "READY heartbeat")
        live = read_registry(KafkaSettings(), names).live(now_ms())
        [reg] = [r for r in live if r.instance_id == agent.instance_id]
        assert reg.inbox_topic == names.inbox(agent.agent_id)
        # the only member owns the whole inbox
        assert sorted(reg.assigned_partitions) == list(range(inbox_partitions(agent.agent_id)))
        assert [c.name for c in reg.capabilities] == ["test.life"]
    states = wait_for(lambda: (lambda s: s if s and s[-1] is None else None)(_states(registry, agent.instance_id)),
                      10, "tombstone")
    compact = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert compact == [AgentState.STARTING, AgentState.READY, AgentState.DRAINING, None]
    assert not read_registry(KafkaSettings(), names).instances(now_ms())


def test_bad_bytes_are_dead_lettered_and_the_partition_moves_on(namespace: str) -> None:
    names = Names(namespace)
    agent = _echo()
    inbox = names.inbox(agent.agent_id)
    with running(agent), Client() as client:
        wait_for(lambda: read_registry(KafkaSettings(), names).live(now_ms()), 30, "READY")
        producer = client._producer_()
        bad_id = new_id()
        producer.produce(inbox, key=b"x", value=b"\x00garbage", partition=1, headers=[(h.MESSAGE_ID, bad_id.encode())])
        producer.produce(inbox, key=b"y", value=b"\xc3\x01" + b"\x01" * 12, partition=1)  # unknown fingerprint
        producer.flush(10)
        good = client.envelope("test.life", {"after": "garbage"})
        client.publish(good, topic=inbox, partition=1)
        receipts = Receipts(names.receipts)
        seen = receipts.wait_status([good.message_id], Status.COMPLETED)
        seen = receipts.wait_status([bad_id], Status.REJECTED)
        dlq_reader = TopicReader(names.dlq)
        dlq = wait_for(lambda: (lambda r: r if len(r) >= 2 else None)(dlq_reader.poll()), 20, "2 dead letters")
    assert [r.status for r in seen[bad_id]] == [Status.REJECTED] and seen[bad_id][0].error.code == "UNDECODABLE"
    by_reason = {d.reason: (d, r.headers) for r in dlq if r.value for d in [codec.decode(r.value, DeadLetter)]}
    assert set(by_reason) == {"UNDECODABLE", "UNKNOWN_SCHEMA"}
    undecodable, headers = by_reason["UNDECODABLE"]
    assert undecodable.envelope == b"\x00garbage" and undecodable.message_id == bad_id
    assert (undecodable.origin_topic, undecodable.origin_partition) == (inbox, 1)
    assert headers[h.ORIGIN_TOPIC] == inbox.encode() and headers[h.ORIGIN_PARTITION] == b"1"
    assert headers[h.ORIGIN_OFFSET] == str(undecodable.origin_offset).encode()
    assert json.loads(next(r for r in seen[good.message_id] if r.status is Status.COMPLETED).result or b"") \
        == {"after": "garbage"}


def test_silent_instance_shows_offline_and_agents_json(namespace: str) -> None:
    proc = spawn("tests.integration.slow_agent:agent", SLOW_AGENT_TTL_MS="1000")
    try:
        def rows(state: str) -> list[dict[str, Any]] | None:
            out = reach_cli("agents", "--json")
            assert out.returncode == 0, out.stderr
            found = [r for r in json.loads(out.stdout) if r["state"] == state]
            return found or None

        [ready] = wait_for(lambda: rows("READY"), 40, "a READY instance in `reach agents --json`")
        assert ready["agent_id"] == "agent://test/slow" and ready["capabilities"] == ["test.slow@1.0.0"]
        assert ready["load"] == 0 and ready["max_concurrency"] == 4 and ready["heartbeat_age_ms"] < 2000
        proc.send_signal(signal.SIGKILL)  # no DRAINING, no tombstone: it just goes silent
        proc.wait(10)
        [offline] = wait_for(lambda: rows("OFFLINE"), 30, "OFFLINE after 2 x ttl")
        assert offline["instance_id"] == ready["instance_id"] and offline["heartbeat_age_ms"] > 2000
        assert offline["reported_state"] == "READY"
    finally:
        proc.kill()
        proc.wait(10)


def test_agent_run_refuses_invalid_declarations(namespace: str) -> None:
    out = reach_cli("agent", "run", "tests.integration.invalid_agent:agent")
    assert out.returncode == 2
    # (reach/cli/common.py prints errors as rich markup, which swallows the `[a-z0-9]...` rule text)
    assert "segment 'Bad_Name' must match" in out.stderr and "Traceback" not in out.stderr
