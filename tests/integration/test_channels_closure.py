"""Closure end to end: a webhook callback carries a reply URL; the reply posted to the real `reach gateway` process
(restarted after the send) becomes a new envelope in the same trace (parent = the outbound callback message),
routed to the capability it asks for, and `reach trace` shows the round trip; a reused, unknown or expired token
is refused and nothing is sent; the ready queries count the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from cryptography.fernet import Fernet
from pydantic import SecretStr
from typer.testing import CliRunner

from reach.agent import Agent
from reach.channels.agent import channel_agent
from reach.channels.closure import callback_id
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.channels.tokens import ReplyClaims, mint
from reach.cli import app as reach_app
from reach.client import Client
from reach.envelopes import now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import Envelope
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import running, wait_for
from tests.integration.channel_servers import Receiver, listening
from tests.integration.stream_app import ROOT, StreamApp
from tests.integration.test_gateway_http import Gateway

pytestmark = pytest.mark.integration
REPLY_SECRET = "reply-secret-for-tests"


def agents() -> Agent:
    agent = Agent("agent://demo/closure", max_concurrency=4)

    @agent.capability("demo.echo", version="1.0.0", input_schema={"type": "object"})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    @agent.capability("support.answer", version="1.0.0", input_schema={
        "type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}})
    async def answer(payload: dict[str, Any]) -> dict[str, Any]:
        return {"heard": payload["text"]}

    return agent


def test_a_reply_to_a_webhook_callback_comes_back_into_the_same_trace(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream_app: StreamApp) -> None:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("REACH_CALLBACK_SECRET", REPLY_SECRET)
    monkeypatch.setenv("REACH_CALLBACK_REPLY_CAPABILITIES", "support.answer")  # what a reply may name
    gateway = Gateway(tmp_path, {})
    monkeypatch.setenv("REACH_CALLBACK_BASE_URL", gateway.url)
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
    gateway.start()
    try:
        with listening(Receiver()) as receiver, running(agents()), running(webhook), Client() as client:
            wait_for(lambda: ready(stream_app, "agent://demo/closure", "agent://channels/webhook"), 60,
                     "both agents READY", interval=0.2)
            mid = client.send("demo.echo", {"text": "hi"}, callback=f"webhook:{receiver.url}/hook")
            hit = wait_for(lambda: receiver.posts()[:1], 60, "the webhook at the receiver")[0]
            body = json.loads(hit.body)
            reply_to = body["reply_to"]
            assert hit.headers["Reach-Reply-To"] == reply_to and reply_to.startswith(gateway.url + "/v1/callbacks/")
            outbound = callback_id(mid, 0)
            # the gateway restarts between the send and the reply: the token was never stored, it still works
            gateway.stop()
            gateway.http = httpx.Client(base_url=gateway.url, timeout=30)
            gateway.start()

            answered = httpx.post(reply_to, json={"capability": "support.answer", "text": "yes, book it"}, timeout=30)
            assert answered.status_code == 202, answered.text
            back = answered.json()
            assert back["message_id"] == outbound + "-re" and back["trace_id"] == body["trace_id"]
            again = httpx.post(reply_to, json={"capability": "support.answer", "text": "twice"}, timeout=30)
            assert (again.status_code, again.json()["error"]) == (409, "token_used")
            bad = httpx.post(gateway.url + "/v1/callbacks/forged.token", json={"text": "x"}, timeout=30)
            assert (bad.status_code, bad.json()["error"]) == (404, "unknown_token")
            expired = mint(REPLY_SECRET.encode(), ReplyClaims(message_id="old", trace_id="t", tenant="default",
                                                              expires_at=now_ms() - 1))
            gone = httpx.post(f"{gateway.url}/v1/callbacks/{expired}", json={"text": "x"}, timeout=30)
            assert (gone.status_code, gone.json()["error"]) == (410, "expired_token")
            sent = envelope_on(namespace, "support.answer", back["message_id"])
            assert (sent.trace_id, sent.parent_id, sent.source) == (body["trace_id"], outbound, "gateway:callback")
            assert json.loads(sent.payload) == {"text": "yes, book it"}

            wait_for(lambda: completed(stream_app, back["message_id"]), 60, "the reply COMPLETED", interval=0.2)
            shown = cli("trace", body["trace_id"], "--json")
            rows = {row["message_id"]: row for row in shown["messages"]}
            assert set(rows) == {mid, outbound, back["message_id"]}  # out and back: one trace
            assert "SENT" in [s["status"] for s in rows[outbound]["timeline"]]
            assert rows[back["message_id"]]["capability"] == "support.answer"
            assert json.loads(rows[back["message_id"]]["result"]) == {"heard": "yes, book it"}

            # the ready queries count this run: one message with a callback, called back; one outbound, answered
            def query(name: str) -> list[dict[str, Any]]:
                return list(cli("receipts", "sql", "--file", str(ROOT / "docs/queries" / name), "--format", "json"))

            # CALLBACKED precedes the callback's COMPLETED, itself long before the reply's
            assert query("callback_effective.sql") == [{"capability": "demo.echo", "with_callback": 1, "callbacked": 1,
                                  "callback_effective_rate": 1.0}]
            assert query("closure.sql") == [{"capability": "channel.webhook", "outbound": 1, "answered": 1,
                                             "closure_rate": 1.0}]
    finally:
        gateway.stop()



def cli(*args: str) -> Any:
    """`reach ARGS` in this process (the same command, without a second interpreter's start-up), as JSON."""
    result = CliRunner().invoke(reach_app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def ready(app: StreamApp, *agent_ids: str) -> bool:
    """Every agent id READY in the stream app's /agents view (what `reach agents` prints)."""
    try:
        rows = httpx.get(app.url + "/agents", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    return set(agent_ids) <= {r["agent_id"] for r in rows if r["state"] == "READY"}


def completed(app: StreamApp, message_id: str) -> bool:
    """The status table's row of the message says COMPLETED (the view `reach status` reads)."""
    try:
        answer = httpx.get(f"{app.url}/messages/{message_id}", timeout=5)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200 and answer.json().get("status") == "COMPLETED"


def envelope_on(namespace: str, capability: str, message_id: str) -> Envelope:
    """The envelope as the broker holds it on its capability topic."""
    topic = Names(namespace).capability(capability)
    consumer = Consumer(KafkaSettings().consumer("closure-test-read"))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])

        def found() -> Envelope | None:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() or msg.value() is None:
                return None
            envelope = codec.decode(msg.value(), Envelope)
            return envelope if envelope.message_id == message_id else None

        return wait_for(found, 30, f"envelope {message_id} on {topic}")
    finally:
        consumer.close()
