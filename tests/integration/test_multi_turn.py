"""Multi-turn end to end (issue 26 item 2) on the real broker, Redis, stream app and gateway: the interview agent
asks for a name (INPUT_REQUIRED), and the answer through `POST /v1/messages/{id}:input`, `reach answer` and A2A
`message/send` with the task id completes it with a greeting that includes the name; a wrong-schema answer and an
answer to a completed task are refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.errors import A2AError
from cryptography.fernet import Fernet
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from examples.interview_agent import QUESTION
from examples.interview_agent import agent as interview_agent
from tests.integration.agent_support import reach_cli, running, wait_for
from tests.integration.gateway_fixtures import Token, gateway, sdk_client, shop_token, until
from tests.integration.stream_app import StreamApp
from tests.integration.test_gateway_http import Gateway

pytestmark = pytest.mark.integration
__all__ = ["Token", "gateway"]  # Token: tests/integration/test_push_notifications.py imports it from here


def asked(gateway: Gateway) -> str:
    """Send demo.interview through the gateway (once an instance serves it) and wait for its question."""
    def sent() -> str | None:
        resp = gateway.post("/v1/envelopes", {"capability": "demo.interview", "payload": {}, "budget_ms": 120_000})
        return str(resp.json()["message_id"]) if resp.status_code == 202 else None

    mid = wait_for(sent, 60, "demo.interview served", interval=0.5)
    row = until(gateway, mid, "INPUT_REQUIRED")
    assert row["input"]["question"] == QUESTION and json.loads(row["input"]["answer_schema"])["required"] == ["name"]
    return mid


def test_the_interview_asks_and_each_way_of_answering_completes_it(gateway: Gateway) -> None:
    with running(interview_agent):
        # HTTP: a wrong answer is refused with the question, the right one completes it, a second is refused
        mid = asked(gateway)
        wrong = gateway.post(f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"nom": "Ada"}})
        assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_answer", wrong.text
        taken = gateway.post(f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Ada"}})
        assert taken.status_code == 202 and taken.json()["generation"] == 1, taken.text
        done = until(gateway, mid, "COMPLETED", generation=1)
        assert json.loads(done["result"])["greeting"] == "Hello, Ada!"
        # the answer's ACCEPTED receipt is acknowledged before the next turn's envelope is produced
        # (reach/ops/turns.py), so the row that reads COMPLETED already has the answered turn
        assert [(t["turn"], json.loads(t["answer"])) for t in done["turns"]] == [(1, {"name": "Ada"})]
        late = gateway.post(f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Eve"}})
        assert late.status_code == 409 and late.json()["error"] == "not_waiting", late.text

        # the CLI: `reach send --wait` stops at the question (exit 1, not completed); a wrong answer exits 2, the
        # right one waits for the greeting
        sent = reach_cli("send", "demo.interview", "--payload", '{"greeting": "Welcome"}', "--wait", "--json")
        assert sent.returncode == 1, sent.stderr
        waiting = json.loads(sent.stdout)
        assert waiting["status"] == "INPUT_REQUIRED" and waiting["input"]["question"] == QUESTION
        cli_mid = waiting["message_id"]
        refused = reach_cli("answer", cli_mid, "--payload", '{"name": 7}')
        assert refused.returncode == 2 and "invalid_answer" in refused.stderr, refused.stderr
        answered = reach_cli("answer", cli_mid, "--payload", '{"name": "Grace"}', "--wait", "--json")
        assert answered.returncode == 0, answered.stderr
        shown = json.loads(answered.stdout)
        assert shown["status"] == "COMPLETED" and shown["result"]["greeting"] == "Welcome, Grace!"
        assert "turn 1: What is your name? -> {\"name\":\"Grace\"}" in reach_cli("status", cli_mid).stdout

        # A2A: the official SDK client gets input-required with the question and answers with the task id
        asyncio.run(a2a_interview(gateway.url, shop_token(gateway)))


async def a2a_interview(url: str, token: str) -> None:
    client = await sdk_client(url, token)
    meta = Struct()
    meta.update({"skill": "demo.interview"})

    def data(value: dict[str, Any], task_id: str = "") -> SendMessageRequest:
        return SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, task_id=task_id,
                                                  parts=[Part(data=ParseDict(value, Value()))], metadata=meta))

    [first] = [e async for e in client.send_message(data({}))]
    task = first.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task.status
    assert task.status.message.parts[0].text == QUESTION
    with pytest.raises(A2AError, match="invalid_answer"):
        [e async for e in client.send_message(data({"name": ""}, task.id))]
    [second] = [e async for e in client.send_message(data({"name": "Linus"}, task.id))]
    assert second.task.id == task.id and second.task.status.state == TaskState.TASK_STATE_COMPLETED, second.task
    assert MessageToDict(second.task.artifacts[0].parts[0].data)["greeting"] == "Hello, Linus!"
    got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED

    # streaming: the stream ends at the question; the answer's stream follows its own turn to the greeting
    streaming = await sdk_client(url, token, streaming=True)
    asked = [e async for e in streaming.send_message(data({}))]
    states = [e.task.status.state if e.HasField("task") else e.status_update.status.state
              for e in asked if e.HasField("task") or e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED, states
    waiting_id = asked[0].task.id
    answered = [e async for e in streaming.send_message(data({"name": "Barbara"}, waiting_id))]
    finals = [e.status_update.status.state for e in answered if e.HasField("status_update")]
    assert finals[-1] == TaskState.TASK_STATE_COMPLETED and TaskState.TASK_STATE_INPUT_REQUIRED not in finals
    [artifact] = [e.artifact_update.artifact for e in answered if e.HasField("artifact_update")]
    assert MessageToDict(artifact.parts[0].data)["greeting"] == "Hello, Barbara!"


def test_a_person_answers_the_question_by_replying_to_its_webhook(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream_app: StreamApp) -> None:
    """A request with a webhook callback: its question goes out through the channel with a reply URL, the reply
    posted there (the closure's token, unsigned) is the answer, and the greeting is the final callback."""
    from pydantic import SecretStr

    from reach.channels.agent import channel_agent
    from reach.channels.settings import ChannelSettings, ClosureSettings
    from reach.client import Client
    from reach.settings import KafkaSettings, ReachSettings, RedisSettings
    from tests.integration.channel_servers import Receiver, listening

    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("REACH_CALLBACK_SECRET", "reply-secret-for-tests")
    gw = Gateway(tmp_path, {})
    monkeypatch.setenv("REACH_CALLBACK_BASE_URL", gw.url)
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
    gw.start()
    try:
        with listening(Receiver()) as receiver, running(interview_agent), running(webhook), Client() as client:
            def sent() -> str | None:
                try:
                    return client.send("demo.interview", {}, budget_ms=120_000, to_agent="agent://demo/interview",
                                       callback=f"webhook:{receiver.url}/hook") if served(stream_app) else None
                except Exception:  # noqa: BLE001 - not served yet
                    return None

            mid = wait_for(sent, 60, "demo.interview and the webhook agent READY", interval=0.5)
            hit = wait_for(lambda: receiver.posts()[:1], 60, "the question at the receiver")[0]
            asked = json.loads(hit.body)
            assert asked["question"] == QUESTION and asked["message_id"] == mid and asked["status"] == "INPUT_REQUIRED"
            wrong = httpx.post(asked["reply_to"], json={"nom": "Ada"}, timeout=30)
            assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_answer"), wrong.text
            taken = httpx.post(asked["reply_to"], json={"name": "Ada"}, timeout=30)
            assert taken.status_code == 202 and taken.json()["message_id"] == mid, taken.text
            ending = wait_for(lambda: receiver.posts()[1:2], 60, "the greeting at the receiver")[0]
            assert json.loads(ending.body)["status"] == "COMPLETED"
            row = httpx.get(f"{stream_app.url}/messages/{mid}", timeout=5).json()
            assert json.loads(row["result"])["greeting"] == "Hello, Ada!" and row["generation"] == 1
            again = httpx.post(asked["reply_to"], json={"name": "Eve"}, timeout=30)
            assert (again.status_code, again.json()["error"]) == (409, "not_waiting")
    finally:
        gw.stop()


def served(app: StreamApp) -> bool:
    try:
        rows = httpx.get(app.url + "/agents", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    ready = {r["agent_id"] for r in rows if r["state"] == "READY"}
    return {"agent://demo/interview", "agent://channels/webhook"} <= ready


def test_a_person_answers_the_question_by_replying_to_its_email(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream_app: StreamApp) -> None:
    """The same conversation by email (a real SMTP server on loopback, aiosmtpd): the question arrives as a mail
    carrying the reply URL, the reply posted there answers it, and the greeting comes as the final mail."""
    import email as mails

    from reach.channels.agent import channel_agent
    from reach.channels.settings import ChannelSettings, ClosureSettings
    from reach.client import Client
    from reach.settings import KafkaSettings, ReachSettings, RedisSettings
    from tests.integration.test_channels import smtp_server

    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("REACH_CALLBACK_SECRET", "reply-secret-for-tests")
    gw = Gateway(tmp_path, {})
    monkeypatch.setenv("REACH_CALLBACK_BASE_URL", gw.url)
    with smtp_server() as (inbox, port):
        mailer = channel_agent("email", settings=ChannelSettings(smtp_host="127.0.0.1", smtp_port=port,
                                                                 smtp_from="reach@test.local", timeout_s=5),
                               kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                               closure=ClosureSettings())
        gw.start()
        try:
            with running(interview_agent), running(mailer), Client() as client:
                def ready() -> bool:
                    rows = httpx.get(stream_app.url + "/agents", timeout=5).json()
                    return {"agent://demo/interview", "agent://channels/email"} <= {
                        r["agent_id"] for r in rows if r["state"] == "READY"}

                wait_for(ready, 60, "demo.interview and the email agent READY", interval=0.5)
                mid = client.send("demo.interview", {}, budget_ms=120_000, callback="email:ada@example.com")

                def mail(n: int) -> dict[str, Any]:
                    _, raw = wait_for(lambda: inbox.messages[n:n + 1], 60, f"mail {n + 1} at the SMTP server")[0]
                    body = mails.message_from_bytes(raw).get_payload(decode=True)
                    return dict(json.loads(body))  # type: ignore[arg-type]

                asked = mail(0)
                assert asked["question"] == QUESTION and asked["message_id"] == mid and asked["reply_to"]
                taken = httpx.post(asked["reply_to"], json={"name": "Ada"}, timeout=30)
                assert taken.status_code == 202 and taken.json()["message_id"] == mid, taken.text
                assert mail(1)["status"] == "COMPLETED"
                row = httpx.get(f"{stream_app.url}/messages/{mid}", timeout=5).json()
                assert json.loads(row["result"])["greeting"] == "Hello, Ada!" and row["generation"] == 1
        finally:
            gw.stop()
