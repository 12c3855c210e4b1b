"""Every answer the service gives in these tests conforms to what /openapi.json declares for it."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.envelopes import now_ms
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.records import Status
from tests.unit.gateway.fakes import LOOPBACK, Fakes, app, sign, signed_get
from tests.unit.gateway.test_service import _receipt


def declared(doc: dict[str, Any], path: str, method: str, status: int) -> tuple[str, dict[str, Any]]:
    responses = doc["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path} answered {status}, which it does not declare"
    content = responses[str(status)].get("content", {})
    media, spec = next(iter(content.items()))
    return media, spec["schema"]


def check(doc: dict[str, Any], path: str, method: str, resp: httpx.Response) -> None:
    media, schema = declared(doc, path, method, resp.status_code)
    assert resp.headers["content-type"].startswith(media.split(";")[0])
    if media == "application/json":
        validator = Draft202012Validator({"allOf": [schema], "components": doc["components"]})
        errors = [e.message for e in validator.iter_errors(resp.json())]
        assert not errors, f"{method.upper()} {path} {resp.status_code}: {errors}"


def test_answers_conform_to_the_document() -> None:
    fakes = Fakes()
    fakes.directory.keys["tiny"] = KeyEntry("tiny", app("tiny", rate=0.01, burst=1), b"s2")
    fakes.status.rows["m1"] = [{"message_id": "m1", "status": "COMPLETED", "tenant": "acme", "timeline": [
        {"status": "COMPLETED", "at": 1, "generation": 0, "attempt": 1}], "trace_id": "t1", "result": "1"}]
    fakes.status.traces["t1"] = ["m1"]
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    doc = client.get("/openapi.json").json()

    def post(path: str, body: Any, key: str = "key1", secret: bytes = b"secret-1", raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        resp = client.post(path, content=data, headers={"Reach-Key": key,
                                                                  "Reach-Signature": sign(secret, data, target=path)})
        check(doc, path, "post", resp)

    for path in ("/v1/envelopes", "/v1/envelopes:batch", "/v1/invoke"):
        good: dict[str, Any] = {"capability": "demo.echo", "payload": {"text": "hi"}}
        if path == "/v1/invoke":
            good["timeout_ms"] = 20  # nothing answers: 504
        post(path, {"items": [good, {"capability": "x"}]} if path.endswith("batch") else good)
        post(path, None, raw=b"{nope")
        post(path, {"capability": "demo.echo"})
        post(path, good, secret=b"wrong")
        post(path, {"capability": "demo.echo", "payload": {"text": "x" * (300 * 1024)}})
        post(path, {"capability": "nobody.serves", "payload": {}})
        post(path, {"capability": "demo.echo", "payload": {"text": 1}})
        post(path, good, key="tiny", secret=b"s2")
        post(path, good, key="tiny", secret=b"s2")
        check(doc, path, "post", client.post(path, content=b"{}"))
    good = {"capability": "demo.echo", "payload": {"text": "hi"}}
    fakes.publisher.on_publish = lambda env: fakes.replies.deliver(_receipt(env, Status.COMPLETED, b'{"a":1}'))
    post("/v1/invoke", {**good, "timeout_ms": 1000})
    fakes.publisher.on_publish = lambda env: fakes.replies.deliver(_receipt(env, Status.UNROUTABLE))
    post("/v1/invoke", {**good, "timeout_ms": 1000})
    post("/v1/envelopes", {**good, "capability": "parked.x", "expire_at": now_ms() + 60_000})
    for path, template in (("/v1/messages/m1", "/v1/messages/{message_id}"),
                           ("/v1/messages/nope", "/v1/messages/{message_id}"),
                           ("/v1/traces/t1", "/v1/traces/{trace_id}"), ("/v1/traces/nope", "/v1/traces/{trace_id}"),
                           ("/v1/messages/m1/events", "/v1/messages/{message_id}/events"),
                           ("/healthz", "/healthz"), ("/metrics", "/metrics")):
        check(doc, template, "get", signed_get(client, path))
        check(doc, template, "get", client.get(path))  # unsigned: 401, declared too
    check(doc, "/healthz", "get", client.get("/healthz", headers={"X-Big": "a" * 20_000}))


def test_the_event_stream_declares_json_errors_and_the_shape_of_each_event() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [{"message_id": "m1", "status": "COMPLETED", "tenant": "acme", "timeline": [
        {"status": "ROUTED", "at": 1}, {"status": "COMPLETED", "at": 2}]}]
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(sse_find=0, sse_poll=0.01), closure=ClosureSettings()),
                        client=LOOPBACK)
    doc = client.get("/openapi.json").json()
    path = "/v1/messages/{message_id}/events"
    check(doc, path, "get", signed_get(client, "/v1/messages/nope/events"))  # a 404 is JSON, and declared so
    resp = signed_get(client, "/v1/messages/m1/events")
    media, schema = declared(doc, path, "get", 200)
    assert media == "text/event-stream" and resp.headers["content-type"].startswith(media)
    # OpenAPI 3.1: an event stream's schema describes each event (the fields an SSE parser yields)
    events = [dict(line.split(": ", 1) for line in block.splitlines()) for block in resp.text.strip().split("\n\n")]
    assert [e["event"] for e in events] == ["receipt", "terminal"]
    validator = Draft202012Validator(schema)
    assert all(not list(validator.iter_errors(e)) for e in events), events
