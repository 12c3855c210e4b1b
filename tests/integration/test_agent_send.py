"""`reach send` publishes a valid envelope to the capability topic; bad input exits 2 before sending."""

from __future__ import annotations

import json

import pytest

from reach.client import Client
from reach.envelopes import PayloadTooLarge, now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import Envelope, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import Receipts, TopicReader, reach_cli, spawn, wait_for


def test_send_publishes_an_envelope_and_prints_its_id(namespace: str) -> None:
    out = reach_cli("send", "demo.echo", "--payload", '{"text": "hi"}', "--version", "^1.0", "--session", "s-1",
                    "--to", "agent://demo/echo")
    assert out.returncode == 0, out.stderr
    message_id = out.stdout.strip()
    reader = TopicReader(Names(namespace).capability("demo.echo"))  # created on demand from topics.yaml
    [record] = wait_for(lambda: reader.poll() or None, 20, "the envelope on the capability topic")
    env = codec.decode(record.value or b"", Envelope)
    assert env.message_id == message_id and record.key == b"s-1"
    assert json.loads(env.payload) == {"text": "hi"} and env.content_type == "application/json"
    assert (env.capability_version, env.to_agent, env.routing.session_key) == ("^1.0", "agent://demo/echo", "s-1")
    assert env.deadline > env.created_at and env.execution_timeout_ms == 0, "not set: the agent's declared one applies"
    assert record.headers["traceparent"].decode().startswith("00-")


def test_send_refuses_bad_input(namespace: str) -> None:
    with Client() as client, pytest.raises(PayloadTooLarge, match="limit is 262,144"):
        client.send("demo.echo", {"blob": "x" * 300_000})
    for args, expect in ((["demo.echo", "--payload", "{nope"], "not valid JSON"),
                         (["Demo", "--payload", "{}"], "dotted lower-case"),
                         (["demo.echo", "--payload", "{}", "--version", "one"], "does not parse")):
        out = reach_cli("send", *args)
        assert out.returncode == 2 and expect in out.stderr, (args[:1], out.stderr)


def test_echo_example_runs_from_the_repo_root(namespace: str) -> None:
    proc = spawn("examples.echo_agent:agent")
    try:
        names = Names(namespace)
        wait_for(lambda: read_registry(KafkaSettings(), names).live(now_ms()), 40, "the echo agent READY")
        receipts = Receipts(names.receipts)
        with Client() as client:
            env = client.envelope("demo.echo", {"text": "hello"})
            client.publish(env, topic=names.inbox("agent://demo/echo"))
        seen = receipts.wait_status([env.message_id], Status.COMPLETED)
        done = next(r for r in seen[env.message_id] if r.status is Status.COMPLETED)
        assert json.loads(done.result or b"") == {"text": "hello"} and done.agent_id == "agent://demo/echo"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
