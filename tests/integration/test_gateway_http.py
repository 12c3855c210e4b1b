"""`reach gateway` as a real process over the real broker, Redis, router, apps (`reach apps create`) and an
echo agent."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from cryptography.fernet import Fernet

from reach.agent import Agent
from reach.kafka import codec
from reach.names import Names
from reach.records import Envelope
from reach.settings import KafkaSettings
from reach.tooling.local.process import free_port
from tests.integration.agent_support import reach_cli, running, wait_for
from tests.integration.stream_app import ROOT, StreamApp
from tests.unit.gateway.fakes import sign

pytestmark = pytest.mark.integration


def create_app(name: str, *options: str) -> dict[str, Any]:
    made = reach_cli("apps", "create", name, *options, "--json")
    assert made.returncode == 0, made.stderr
    return dict(json.loads(made.stdout))


class Gateway:
    """`python -m reach gateway --port P` on a free port; signs what it sends with the apps it was given."""

    def __init__(self, log_dir: Path, apps: dict[str, dict[str, Any]], env: dict[str, str] | None = None) -> None:
        self.apps = apps
        self.env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"gateway-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def start(self) -> None:
        env = {**os.environ, "REACH_GATEWAY_BODY_TIMEOUT": "2", **self.env}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "reach", "gateway", "--port", str(self.port)],
                                         cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for(self._healthy, 60, "the gateway's /healthz", interval=0.2)

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"gateway exited: {self.log.read_text()[-3000:]}")
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def signed(self, raw: bytes, app: str = "shop", secret: str | None = None, *, method: str = "POST",
               target: str = "/v1/envelopes") -> dict[str, str]:
        made = self.apps[app]
        return {"Reach-Key": made["key_id"],
                "Reach-Signature": sign((secret or made["secret"]).encode(), raw, method=method, target=target)}

    def post(self, path: str, body: Any, *, app: str = "shop", secret: str | None = None) -> httpx.Response:
        raw = json.dumps(body).encode()
        return self.http.post(path, content=raw, headers={"Content-Type": "application/json",
                                                          **self.signed(raw, app, secret, target=path)})

    def get(self, path: str, *, app: str = "shop") -> httpx.Response:
        """A status read, signed over the empty body."""
        return self.http.get(path, headers=self.signed(b"", app, method="GET", target=path))

    def stop(self) -> None:
        self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def echo_agent() -> Agent:
    agent = Agent("agent://demo/echo", region="local", max_concurrency=8)

    @agent.capability("demo.echo", version="1.0.0", input_schema={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


def records_on(topic: str) -> int:
    """How many records a topic holds now (sum of high watermarks): the bus as the broker sees it."""
    consumer = Consumer(KafkaSettings().consumer("gateway-test-count"))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions)
    finally:
        consumer.close()


def invoked_source(namespace: str, message_id: str) -> str:
    """The source stamped on the envelope as the broker holds it (read back from its capability topic)."""
    topic = Names(namespace).capability("demo.echo")
    consumer = Consumer(KafkaSettings().consumer("gateway-test-read"))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])

        def found() -> str | None:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() or msg.value() is None:
                return None
            envelope = codec.decode(msg.value(), Envelope)
            return envelope.source if envelope.message_id == message_id else None

        return wait_for(found, 30, f"envelope {message_id} on {topic}")
    finally:
        consumer.close()


@pytest.fixture
def apps(namespace: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    return {"shop": create_app("shop"), "tiny": create_app("tiny", "--rate", "0.01", "--burst", "1"),
            "rival": create_app("rival", "--tenant", "globex")}


@pytest.fixture
def gateway(stream_app: StreamApp, tmp_path: Path, apps: dict[str, dict[str, Any]]) -> Iterator[Gateway]:
    gw = Gateway(tmp_path, apps)
    gw.start()
    yield gw
    gw.stop()


def sse_events(gw: Gateway, message_id: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    events = f"/v1/messages/{message_id}/events"
    with gw.http.stream("GET", events, timeout=60, headers=gw.signed(b"", method="GET", target=events)) as resp:
        assert resp.status_code == 200
        event = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: ") and event is not None:
                out.append((event, json.loads(line[len("data: "):])))
    return out


def test_signed_requests_route_complete_and_refusals_never_reach_the_bus(namespace: str, gateway: Gateway) -> None:
    echo = {"capability": "demo.echo", "version": "^1", "payload": {"text": "hi"}}
    with running(echo_agent()):
        accepted = wait_for(lambda: (r := gateway.post("/v1/envelopes", echo)).status_code == 202 and r, 60,
                            "the gateway to see the echo agent")  # 404 until its registry reader has the agent
        body = accepted.json()
        assert body["status_url"] == f"/v1/messages/{body['message_id']}"

        def completed() -> dict[str, Any] | None:
            resp = gateway.get(body["status_url"])
            return resp.json() if resp.status_code == 200 and resp.json()["status"] == "COMPLETED" else None

        row = wait_for(completed, 60, "the envelope to complete")
        assert row["tenant"] == "default" and json.loads(row["result"]) == {"text": "hi"}
        assert invoked_source(namespace, body["message_id"]) == f"gateway:{gateway.apps['shop']['app_id']}"
        trace = f"/v1/traces/{body['trace_id']}"
        assert gateway.get(trace).json()["message_ids"] == [body["message_id"]]
        # unsigned reads are refused; another tenant's app sees neither the message nor the trace
        for path in (body["status_url"], trace, body["status_url"] + "/events"):
            assert gateway.http.get(path).status_code == 401, path
            hidden = gateway.get(path, app="rival")
            assert hidden.status_code == 404 and hidden.json()["error"] == "not_found", path
        # a channel capability needs listing, even for an app allowed everything else
        hook = {"capability": "channel.webhook", "payload": {"endpoint": "http://169.254.169.254/", "body": {}}}
        assert gateway.post("/v1/envelopes", hook).status_code == 403
        assert gateway.http.get("/healthz").json()["directory"] == "running"

        events = sse_events(gateway, body["message_id"])
        assert events[-1][0] == "terminal" and events[-1][1]["status"] == "COMPLETED"
        assert [e for e, _ in events[:-1]] == ["receipt"] * (len(events) - 1)

        invoked = gateway.post("/v1/invoke", {**echo, "payload": {"text": "again"}, "timeout_ms": 30_000})
        assert invoked.status_code == 200, invoked.text
        assert invoked.json()["result"] == {"text": "again"} and invoked.json()["status"] == "COMPLETED"

        batch = gateway.post("/v1/envelopes:batch", {"items": [echo, {"capability": "nobody.serves", "payload": {}}]})
        assert [item["status"] for item in batch.json()["items"]] == [202, 404]

        topic = Names(namespace).capability("demo.echo")
        assert gateway.post("/v1/envelopes", {**echo, "payload": {"text": "x" * (300 * 1024)}}).status_code == 413
        invalid = gateway.post("/v1/envelopes", {**echo, "payload": {"text": 5}})
        assert invalid.status_code == 422 and "at text" in invalid.json()["message"]
        unknown = gateway.post("/v1/envelopes", {"capability": "nobody.serves", "payload": {}})
        assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_capability"
        assert gateway.post("/v1/envelopes", echo, app="tiny").status_code == 202
        on_bus = records_on(topic)
        over = gateway.post("/v1/envelopes", echo, app="tiny")
        assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
        denied = gateway.post("/v1/envelopes", echo, secret="rs_wrong")
        assert denied.status_code == 401 and denied.json()["error"] == "denied"
        assert records_on(topic) == on_bus

        metrics = gateway.http.get("/metrics").text
        tiny, shop = gateway.apps["tiny"]["app_id"], gateway.apps["shop"]["app_id"]
        assert f'agentreach_gateway_quota_hits_total{{app="{tiny}",capability="demo.echo",scope="app"}} 1.0' in metrics
        assert f'agentreach_gateway_requests_total{{app="{shop}",route="/v1/envelopes",status="202"}}' in metrics
        assert "agentreach_gateway_accept_seconds_count" in metrics


def test_a_repeated_idempotency_key_is_one_message(namespace: str, gateway: Gateway) -> None:
    body = {"capability": "nobody.serves", "payload": {"n": 1}, "idempotency_key": "order-42",
            "expire_at": 4_102_444_800_000}  # parked: no instance needed, the envelope still goes on the bus
    first = gateway.post("/v1/envelopes", body)
    again = gateway.post("/v1/envelopes", body)
    assert first.status_code == again.status_code == 202, first.text
    assert first.json() == again.json()
    assert records_on(Names(namespace).capability("nobody.serves")) == 1


def read_response(sock: socket.socket) -> bytes:
    """One whole HTTP/1.1 response (head, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def test_slow_and_oversized_clients_do_not_stall_a_signed_request(namespace: str, gateway: Gateway) -> None:
    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", gateway.port), timeout=30)

    half_head = connect()  # a head that never ends
    half_head.sendall(b"POST /v1/envelopes HTTP/1.1\r\nHost: x\r\nReach-Key: k-main\r\n")
    half_body = connect()  # a body that never arrives, under a header that passes the checks made before the body
    well_formed = f"t={int(time.time())},n=half-body-0001,v2={'0' * 64}".encode()
    half_body.sendall(b"POST /v1/envelopes HTTP/1.1\r\nHost: x\r\nReach-Key: k-main\r\nReach-Signature: "
                      + well_formed + b"\r\nContent-Length: 1000\r\n\r\n{")
    huge = connect()
    huge.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 * 1024) + b"\r\n\r\n")
    try:
        parked = {"capability": "nobody.serves", "payload": {}, "expire_at": 4_102_444_800_000}
        assert gateway.post("/v1/envelopes", parked).status_code == 202
        assert huge.recv(64).split(b" ")[1] == b"431"
        answer = read_response(half_body)  # refused after REACH_GATEWAY_BODY_TIMEOUT, the others went on meanwhile
        assert answer.split(b" ")[1] == b"408" and b"body_timeout" in answer
    finally:
        for sock in (half_head, half_body, huge):
            sock.close()


def test_the_quota_is_shared_by_two_replicas(namespace: str, apps: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    replicas = [Gateway(tmp_path, apps), Gateway(tmp_path, apps)]
    parked = {"capability": "nobody.serves", "payload": {}, "expire_at": 4_102_444_800_000}
    try:
        for replica in replicas:
            replica.start()
        assert replicas[0].post("/v1/envelopes", parked, app="tiny").status_code == 202
        over = replicas[1].post("/v1/envelopes", parked, app="tiny")  # the same app's bucket, in Redis
        assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
        assert replicas[1].post("/v1/envelopes", parked).status_code == 202  # another app is not affected
        tiny = apps["tiny"]["app_id"]
        hits = replicas[1].http.get("/metrics").text
        assert f'agentreach_gateway_quota_hits_total{{app="{tiny}",capability="other",scope="app"}} 1.0' in hits
        assert records_on(Names(namespace).capability("nobody.serves")) == 2
    finally:
        for replica in replicas:
            replica.stop()
