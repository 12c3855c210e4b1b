"""The gateway's HTTP service over in-memory fakes: the door's order, 202-after-ack, idempotency, batch, invoke."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.envelopes import new_envelope
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.records import Receipt, Status
from tests.unit.gateway.fakes import LOOPBACK, Fakes, app, echo_capability, sign, signed_get, stream_body


def post(client: TestClient, path: str, body: Any, *, secret: bytes = b"secret-1", key: str = "key1",
         raw: bytes | None = None, **headers: str) -> httpx.Response:
    data = raw if raw is not None else json.dumps(body).encode()
    signed = {"Reach-Key": key, "Reach-Signature": sign(secret, data, target=path), "Content-Type": "application/json"}
    return client.post(path, content=data, headers={**signed, **headers})


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture
def client(fakes: Fakes) -> TestClient:
    return TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)


def test_accepted_after_the_ack_with_tenant_and_source_from_the_app(client: TestClient, fakes: Fakes) -> None:
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "version": "^1", "payload": {"text": "hi"},
                                          "routing": {"region": "eu", "session_key": "s1", "tags": ["gpu"],
                                                      "priority": 3, "canary": True},
                                          "callback": "https://caller.example/done", "budget_ms": 9000})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    [envelope] = fakes.publisher.sent
    assert body == {"message_id": envelope.message_id, "trace_id": envelope.trace_id,
                    "status_url": f"/v1/messages/{envelope.message_id}"}
    assert (envelope.tenant, envelope.source) == ("acme", "gateway:app1")
    assert envelope.schema_version == "1.0.0", "the contract version the payload was checked against"
    assert json.loads(envelope.payload) == {"text": "hi"}
    assert envelope.capability_version == "^1"
    assert envelope.routing.model_dump() == {"region": "eu", "session_key": "s1", "tags": ["gpu"], "priority": 3,
                                             "canary": True}
    assert envelope.callback == "https://caller.example/done"
    assert envelope.deadline - envelope.created_at == 9000


def test_the_body_cannot_choose_tenant_or_source(client: TestClient, fakes: Fakes) -> None:
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}, "tenant": "evil",
                                          "source": "router"})
    assert resp.status_code == 400
    assert resp.json()["error"] == "bad_request" and "tenant" in resp.json()["message"]
    assert fakes.publisher.sent == []


@pytest.mark.parametrize("headers, code", [
    ({}, "missing"),
    ({"Reach-Key": "key1", "Reach-Signature": "t=1,v1=00"}, "malformed"),
    ({"Reach-Key": "key1", "Reach-Signature": "t=1,n=abcdefgh,v2=" + "0" * 64}, "stale"),
    ({"Reach-Key": "nobody", "Reach-Signature": "sign now"}, "denied"),
])
def test_unsigned_or_badly_signed_is_401_and_nothing_is_sent(client: TestClient, fakes: Fakes,
                                                              headers: dict[str, str], code: str) -> None:
    if headers.get("Reach-Signature") == "sign now":  # signed at run time: collected long before, it would be stale
        headers = {**headers, "Reach-Signature": sign(b"secret-1", b'{"capability":"demo.echo","payload":{}}')}
    resp = client.post("/v1/envelopes", content=b'{"capability":"demo.echo","payload":{}}', headers=headers)
    assert resp.status_code == 401
    assert resp.json()["error"] == code and resp.json()["message"]
    assert fakes.publisher.sent == [] and fakes.quotas.taken == 0


def test_a_wrong_secret_is_401(client: TestClient, fakes: Fakes) -> None:
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}}, secret=b"guess")
    assert resp.status_code == 401 and fakes.publisher.sent == []


def test_oversized_by_content_length_and_by_payload_is_413(client: TestClient, fakes: Fakes) -> None:
    big = {"capability": "demo.echo", "payload": {"text": "x" * (300 * 1024)}}
    assert post(client, "/v1/envelopes", big).status_code == 413
    near = {"capability": "demo.echo", "payload": {"text": "x" * (260 * 1024)}}  # body under 288 KiB, payload over
    resp = post(client, "/v1/envelopes", near)
    assert resp.status_code == 413 and "payload" in resp.json()["message"]
    assert fakes.publisher.sent == []


def test_a_body_longer_than_its_content_length_claims_is_cut_at_the_limit(fakes: Fakes) -> None:
    import asyncio

    from reach.gateway import checks

    async def chunks() -> Any:
        for _ in range(100):
            yield b"x" * 1024

    with pytest.raises(checks.Refusal) as refused:
        asyncio.run(checks.read_body("10", chunks(), 4096))
    assert refused.value.status == 413


def test_not_json_is_400(client: TestClient) -> None:
    resp = post(client, "/v1/envelopes", None, raw=b"{not json")
    assert resp.status_code == 400 and resp.json()["error"] == "bad_json"


def test_forbidden_capability_is_403(fakes: Fakes) -> None:
    fakes.directory.keys["key2"] = KeyEntry("key2", app("app2", capabilities=("other.cap",)), b"s2")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}}, key="key2",
                secret=b"s2")
    assert resp.status_code == 403 and resp.json()["error"] == "forbidden"


def test_over_quota_is_429_with_retry_after_and_counted(fakes: Fakes) -> None:
    fakes.directory.keys["slow"] = KeyEntry("slow", app("slowapp", rate=0.5, burst=2), b"s3")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    codes = [post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}}, key="slow",
                  secret=b"s3") for _ in range(3)]
    assert [r.status_code for r in codes] == [202, 202, 429]
    assert codes[2].headers["Retry-After"] == "2" and codes[2].json()["error"] == "quota_exceeded"
    assert len(fakes.publisher.sent) == 2
    metrics = client.get("/metrics").text
    assert 'agentreach_gateway_quota_hits_total{app="slowapp",capability="demo.echo",scope="app"} 1.0' in metrics
    assert 'agentreach_gateway_requests_total{app="slowapp",route="/v1/envelopes",status="429"} 1.0' in metrics


def test_unknown_capability_is_404_unless_expire_at_waits(client: TestClient, fakes: Fakes) -> None:
    resp = post(client, "/v1/envelopes", {"capability": "nobody.serves", "payload": {}})
    assert resp.status_code == 404 and resp.json()["error"] == "unknown_capability"
    wrong_range = post(client, "/v1/envelopes", {"capability": "demo.echo", "version": "^2", "payload": {}})
    assert wrong_range.status_code == 404 and "1.0.0" in wrong_range.json()["message"]
    from reach.envelopes import now_ms

    parked = post(client, "/v1/envelopes", {"capability": "nobody.serves", "payload": {},
                                            "expire_at": now_ms() + 60_000})
    assert parked.status_code == 202
    assert [e.capability for e in fakes.publisher.sent] == ["nobody.serves"]
    assert fakes.publisher.sent[0].schema_version is None, "parked for a version not live: no contract yet"


def test_schema_violation_of_every_matching_version_is_422_with_the_path(fakes: Fakes) -> None:
    strict = echo_capability("1.0.0")
    loose = echo_capability("1.1.0", '{"type":"object"}')
    fakes.catalog.capabilities = [strict]
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": 5}})
    assert resp.status_code == 422
    assert resp.json()["error"] == "invalid_payload" and "at text" in resp.json()["message"]
    fakes.catalog.capabilities = [strict, loose]  # one matching version accepts it: the router picks that one
    assert post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": 5}}).status_code == 202
    assert fakes.publisher.sent[-1].schema_version == "1.1.0", "stamped with the version that accepts it"
    assert post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "ok"}}).status_code == 202
    assert fakes.publisher.sent[-1].schema_version == "1.0.0", "both accept it: the oldest of the line"
    assert post(client, "/v1/envelopes", {"capability": "demo.echo", "version": "~1.0",
                                          "payload": {"text": 5}}).status_code == 422


def test_the_door_checks_in_order(fakes: Fakes) -> None:
    """Over quota AND unknown capability: 429 first (the quota is spent before the registry is consulted)."""
    fakes.directory.keys["tiny"] = KeyEntry("tiny", app("tiny", rate=0.01, burst=1), b"s4")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    first = post(client, "/v1/envelopes", {"capability": "nobody.serves", "payload": {}}, key="tiny", secret=b"s4")
    second = post(client, "/v1/envelopes", {"capability": "nobody.serves", "payload": {}}, key="tiny", secret=b"s4")
    assert (first.status_code, second.status_code) == (404, 429)


def test_a_repeated_idempotency_key_returns_the_original_202(client: TestClient, fakes: Fakes) -> None:
    body = {"capability": "demo.echo", "payload": {"text": "x"}, "idempotency_key": "order-7"}
    first, again = post(client, "/v1/envelopes", body), post(client, "/v1/envelopes", body)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    [envelope] = fakes.publisher.sent
    assert envelope.idempotency_key == "gateway:app1:order-7"


def test_a_repeated_idempotency_key_with_a_different_request_is_422_and_nothing_is_sent(
        client: TestClient, fakes: Fakes) -> None:
    first = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x", "n": 1},
                                           "idempotency_key": "order-8"})
    reordered = post(client, "/v1/envelopes", {"payload": {"n": 1, "text": "x"}, "capability": "demo.echo",
                                               "idempotency_key": "order-8"})
    changed = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "y", "n": 1},
                                             "idempotency_key": "order-8"})
    assert (first.status_code, reordered.status_code) == (202, 202)  # the same request, keys in another order
    assert reordered.json() == first.json()
    assert changed.status_code == 422 and changed.json()["error"] == "idempotency_key_reused", changed.text
    budgeted = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x", "n": 1},
                                              "idempotency_key": "order-8", "max_tokens": 10})
    assert budgeted.status_code == 422  # another budget is another request
    assert len(fakes.publisher.sent) == 1


def test_an_unacknowledged_publish_is_503_and_frees_the_key(client: TestClient, fakes: Fakes) -> None:
    body = {"capability": "demo.echo", "payload": {"text": "x"}, "idempotency_key": "k"}
    fakes.publisher.fail = True
    resp = post(client, "/v1/envelopes", body)
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
    fakes.publisher.fail = False
    assert post(client, "/v1/envelopes", body).status_code == 202
    assert len(fakes.publisher.sent) == 1


def test_batch_gives_each_item_its_own_status(client: TestClient, fakes: Fakes) -> None:
    items = [{"capability": "demo.echo", "payload": {"text": "a"}}, {"capability": "nobody.serves", "payload": {}},
             {"capability": "demo.echo", "payload": {"text": 1}}, {"nope": 1}]
    resp = post(client, "/v1/envelopes:batch", {"items": items})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [i["status"] for i in body["items"]] == [202, 404, 422, 400]
    assert (body["accepted"], body["refused"]) == (1, 3)
    assert body["items"][0]["accepted"]["message_id"] == fakes.publisher.sent[0].message_id
    too_many = post(client, "/v1/envelopes:batch", {"items": [items[0]] * 501})
    assert too_many.status_code == 400


def _receipt(envelope: Any, status: Status, result: bytes | None = None, error: Any = None) -> Receipt:
    return Receipt(message_id=envelope.message_id, trace_id=envelope.trace_id, tenant=envelope.tenant,
                   capability=envelope.capability, status=status, at=1, result=result, error=error,
                   agent_id="agent://demo/echo", instance_id="i1")


def test_invoke_returns_the_agents_result(client: TestClient, fakes: Fakes) -> None:
    fakes.publisher.on_publish = lambda env: fakes.replies.deliver(_receipt(env, Status.COMPLETED, b'{"text":"hi"}'))
    resp = post(client, "/v1/invoke", {"capability": "demo.echo", "payload": {"text": "hi"}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"] == {"text": "hi"} and resp.json()["status"] == "COMPLETED"
    [envelope] = fakes.publisher.sent
    assert envelope.reply_to == fakes.replies.topic


def test_invoke_reports_a_failure_and_a_timeout(client: TestClient, fakes: Fakes) -> None:
    from reach.records import ErrorInfo

    failed = ErrorInfo(kind="BUSINESS", code="E1", message="boom")
    fakes.publisher.on_publish = lambda env: fakes.replies.deliver(_receipt(env, Status.FAILED, error=failed))
    resp = post(client, "/v1/invoke", {"capability": "demo.echo", "payload": {"text": "x"}})
    assert resp.status_code == 502
    assert resp.json()["error"] == "failed" and resp.json()["receipt_error"]["code"] == "E1"
    fakes.publisher.on_publish = None
    slow = post(client, "/v1/invoke", {"capability": "demo.echo", "payload": {"text": "x"}, "timeout_ms": 50})
    assert slow.status_code == 504 and slow.json()["status"] == "PENDING"
    assert fakes.replies.waiting == {}


def test_invoke_stops_at_the_agents_question(client: TestClient, fakes: Fakes) -> None:
    from reach.records import InputRequest

    def asks(env: Any) -> None:
        fakes.replies.deliver(_receipt(env, Status.INPUT_REQUIRED).model_copy(
            update={"input": InputRequest(question="What is your name?", answer_schema="{}")}))

    fakes.publisher.on_publish = asks
    resp = post(client, "/v1/invoke", {"capability": "demo.echo", "payload": {"text": "x"}})
    assert resp.status_code == 202 and resp.json()["status"] == "INPUT_REQUIRED", resp.text
    assert resp.json()["error"] == "input_required" and resp.json()["message"].endswith("asks: What is your name?")
    assert ":input" in resp.json()["hint"]


def test_invoke_wait_is_capped(fakes: Fakes) -> None:
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(invoke_timeout_max_ms=30), closure=ClosureSettings()),
                        client=LOOPBACK)
    resp = post(client, "/v1/invoke", {"capability": "demo.echo", "payload": {"text": "x"}, "timeout_ms": 600_000})
    assert resp.status_code == 504 and "30 ms" in resp.json()["message"]


def test_status_routes_pass_the_status_table_through(client: TestClient, fakes: Fakes) -> None:
    fakes.status.rows["m1"] = [{"message_id": "m1", "tenant": "acme", "status": "ROUTED", "timeline": []}]
    fakes.status.traces["t1"] = ["m1"]
    assert signed_get(client, "/v1/messages/m1").json()["status"] == "ROUTED"
    missing = signed_get(client, "/v1/messages/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert signed_get(client, "/v1/traces/t1").json() == {"trace_id": "t1", "message_ids": ["m1"]}


@pytest.mark.parametrize("path", ["/v1/messages/m1", "/v1/traces/t1", "/v1/messages/m1/events"])
def test_status_reads_need_a_signature_over_the_empty_body(client: TestClient, fakes: Fakes, path: str) -> None:
    fakes.status.rows["m1"] = [{"message_id": "m1", "tenant": "acme", "status": "COMPLETED", "timeline": []}]
    fakes.status.traces["t1"] = ["m1"]
    assert client.get(path).status_code == 401
    assert signed_get(client, path, secret=b"wrong").status_code == 401
    over_a_body = {"Reach-Key": "key1", "Reach-Signature": sign(b"secret-1", b"{}", method="GET", target=path)}
    assert client.get(path, headers=over_a_body).status_code == 401
    assert signed_get(client, path).status_code == 200


def test_another_tenants_rows_read_as_absent_and_a_trace_shows_only_the_callers(fakes: Fakes) -> None:
    fakes.directory.keys["key2"] = KeyEntry("key2", app("app2", tenant="globex"), b"s2")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(sse_find=0, sse_poll=0.01), closure=ClosureSettings()),
                        client=LOOPBACK)
    fakes.status.rows["mine"] = [{"message_id": "mine", "tenant": "acme", "status": "COMPLETED", "timeline": []}]
    fakes.status.rows["theirs"] = [{"message_id": "theirs", "tenant": "globex", "status": "COMPLETED",
                                    "timeline": []}]
    fakes.status.traces["t1"] = ["mine", "theirs"]
    fakes.status.traces["t2"] = ["theirs"]
    absent = signed_get(client, "/v1/messages/nope")
    for path in ("/v1/messages/theirs", "/v1/messages/theirs/events"):
        resp = signed_get(client, path)
        assert resp.status_code == 404 and resp.json()["error"] == "not_found" and "globex" not in resp.text
        assert resp.json()["message"] == absent.json()["message"].replace("nope", "theirs")
    assert signed_get(client, "/v1/traces/t1").json() == {"trace_id": "t1", "message_ids": ["mine"]}
    assert signed_get(client, "/v1/traces/t2").status_code == 404
    theirs = signed_get(client, "/v1/traces/t1", key="key2", secret=b"s2")
    assert theirs.json() == {"trace_id": "t1", "message_ids": ["theirs"]}


def test_channel_capabilities_are_refused_unless_the_app_lists_them(fakes: Fakes) -> None:
    fakes.directory.keys["key2"] = KeyEntry("key2", app("app2", capabilities=("channel.webhook",)), b"s2")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    hook = {"capability": "channel.webhook", "payload": {"endpoint": "http://169.254.169.254/", "body": {}}}
    for capability in ("channel.webhook", "channel.email"):
        resp = post(client, "/v1/envelopes", {**hook, "capability": capability})  # app1: every capability...
        assert resp.status_code == 403 and resp.json()["error"] == "forbidden"
    assert post(client, "/v1/envelopes", hook, key="key2", secret=b"s2").status_code != 403  # listed: allowed
    assert app().may_call("demo.echo") and not app().may_call("channel.sms")
    assert fakes.publisher.sent == []


def test_a_stopped_apps_directory_refuses_with_503_and_healthz_says_so(client: TestClient, fakes: Fakes) -> None:
    fakes.status.rows["m1"] = [{"message_id": "m1", "tenant": "acme", "status": "COMPLETED", "timeline": []}]
    fakes.directory.alive = False  # the follower thread died: the key table may miss a revocation
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}})
    assert resp.status_code == 503 and "apps directory" in resp.json()["message"] and fakes.publisher.sent == []
    assert signed_get(client, "/v1/messages/m1").status_code == 503
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json()["directory"] == "stopped" and not health.json()["ok"]


def test_unknown_routes_get_the_json_error_body(client: TestClient) -> None:
    resp = client.get("/v2/nothing")
    assert resp.status_code == 404 and set(resp.json()) == {"error", "message", "hint"}
    metrics = client.get("/metrics").text
    assert 'route="(unmatched)"' in metrics and "/v2/nothing" not in metrics


def test_openapi_documents_every_route_body_and_error(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    assert {"/v1/envelopes", "/v1/envelopes:batch", "/v1/invoke", "/v1/messages/{message_id}",
            "/v1/messages/{message_id}/events", "/v1/traces/{trace_id}", "/healthz", "/metrics"} <= set(paths)
    send = paths["/v1/envelopes"]["post"]
    assert send["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/EnvelopeRequest")
    assert {"202", "400", "401", "403", "404", "413", "422", "429", "503"} <= set(send["responses"])
    assert "Retry-After" in send["responses"]["429"]["headers"]
    schemas = doc["components"]["schemas"]
    assert {"EnvelopeRequest", "InvokeRequest", "BatchRequest", "ErrorBody", "Accepted", "Routing"} <= set(schemas)
    assert schemas["BatchRequest"]["properties"]["items"]["items"]["$ref"].endswith("/EnvelopeRequest")


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"ok": True, "registry": "running", "replies": "running",
                                             "directory": "running"}


def test_a_huge_request_head_is_431_before_any_route(client: TestClient, fakes: Fakes) -> None:
    resp = client.get("/healthz", headers={"X-Big": "a" * (20 * 1024)})
    assert resp.status_code == 431 and resp.json()["error"] == "headers_too_large"


def test_a_replayed_nonce_is_401_replay(client: TestClient, fakes: Fakes) -> None:
    raw = json.dumps({"capability": "demo.echo", "payload": {"text": "x"}}).encode()
    headers = {"Reach-Key": "key1", "Reach-Signature": sign(b"secret-1", raw, nonce="n-12345678")}
    assert client.post("/v1/envelopes", content=raw, headers=headers).status_code == 202
    again = client.post("/v1/envelopes", content=raw, headers=headers)
    assert again.status_code == 401 and again.json()["error"] == "replay"
    assert len(fakes.publisher.sent) == 1


def test_redis_not_answering_is_503_never_admitted_unmetered(fakes: Fakes) -> None:
    from reach.callers import CallerApp
    from reach.errors import InfraUnavailable
    from reach.gateway.ports import QuotaDecision

    class DownQuotas:
        def take(self, app: CallerApp, capability: str) -> QuotaDecision:
            raise InfraUnavailable("Redis did not answer (fake)")

        def take_read(self, app: CallerApp, cost: int = 1) -> QuotaDecision:
            raise InfraUnavailable("Redis did not answer (fake)")

    fakes.quotas = DownQuotas()  # type: ignore[assignment]
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}})
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
    assert resp.json()["error"] == "unavailable" and fakes.publisher.sent == []


def test_a_repeated_invoke_is_answered_from_the_first_requests_status_row(client: TestClient, fakes: Fakes) -> None:
    fakes.publisher.on_publish = lambda env: fakes.replies.deliver(_receipt(env, Status.COMPLETED, b'"done"'))
    body = {"capability": "demo.echo", "payload": {"text": "x"}, "idempotency_key": "inv-1", "timeout_ms": 2000}
    first = post(client, "/v1/invoke", body)
    assert first.status_code == 200 and first.json()["result"] == "done"
    message_id = first.json()["message_id"]
    fakes.status.rows[message_id] = [{"message_id": message_id, "trace_id": "t", "status": "ROUTED"},
                                     {"message_id": message_id, "trace_id": "t", "status": "COMPLETED",
                                      "result": '"done"'}]
    again = post(client, "/v1/invoke", body)
    assert again.status_code == 200, again.text
    assert (again.json()["message_id"], again.json()["result"]) == (message_id, "done")
    assert len(fakes.publisher.sent) == 1 and fakes.replies.waiting == {}


def test_an_error_message_quoting_a_huge_value_is_cut(client: TestClient) -> None:
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": ["x" * 1000] * 200})
    assert resp.status_code == 422 and len(resp.json()["message"]) <= 1001
    deep = post(client, "/v1/envelopes", None, raw=b'{"capability":"demo.echo","payload":' + b"[" * 900 + b"]" * 900
                + b"}")
    assert deep.status_code in (400, 422) and len(deep.json()["message"]) <= 1001


def test_the_hot_path_answers_like_the_router(client: TestClient, fakes: Fakes) -> None:
    """POST /v1/envelopes bypasses the router (reach.gateway.service.HotPath): same answers, same metrics."""
    good = {"capability": "demo.echo", "payload": {"text": "hi"}}
    accepted = post(client, "/v1/envelopes", good)
    assert accepted.status_code == 202 and accepted.headers["content-type"] == "application/json"
    assert post(client, "/v1/envelopes", good, secret=b"wrong").json()["error"] == "denied"
    fakes.publisher.fail = True
    down = post(client, "/v1/envelopes", good)
    assert down.status_code == 503 and down.headers["retry-after"] == "1"
    other = client.get("/v1/envelopes")  # another method still goes to the router
    assert other.status_code == 405 and other.json()["error"] == "method_not_allowed"
    metrics = client.get("/metrics").text
    for status, app_id in (("202", "app1"), ("503", "app1"), ("401", "-")):
        assert f'agentreach_gateway_requests_total{{app="{app_id}",route="/v1/envelopes",status="{status}"}} 1.0' \
            in metrics, metrics


@pytest.mark.parametrize("path", ["/v1/envelopes", "/v1/envelopes:batch", "/v1/invoke"])
@pytest.mark.parametrize("signature, code", [
    (None, "missing"),
    ("t=1,v1=00", "malformed"),
    ("t=1764590000,v2=" + "0" * 64, "malformed"),  # no nonce
    ("t=1,n=abcdefgh,v2=" + "0" * 64, "stale"),
])
def test_a_missing_or_malformed_signature_is_refused_before_the_body_is_read(fakes: Fakes, path: str,
                                                                            signature: str | None, code: str) -> None:
    """Issue 28, finding 10: the door read up to 8 MiB (for up to 10 s) before looking at the signature."""
    headers = {"Reach-Key": "key1", "Content-Type": "application/json"}
    if signature is not None:
        headers["Reach-Signature"] = signature
    answer = stream_body(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()), "POST", path, headers)
    assert (answer.status, json.loads(answer.body)["error"], answer.reads) == (401, code, 0)
    assert fakes.publisher.sent == []


def test_a_request_refused_for_its_own_bytes_gives_its_nonce_back_and_any_other_refusal_keeps_it(
        client: TestClient, fakes: Fakes) -> None:
    """Issue 28, finding 4: nonces of refused requests held Redis memory for the whole window; issue 37, finding 6:
    giving back the nonce of a refusal that time can change (429) let a captured request be replayed once."""
    fakes.directory.keys["tiny"] = KeyEntry("tiny", app("tiny", rate=0.01, burst=1), b"s2")
    raw = json.dumps({"capability": "demo.echo", "payload": {"text": "x"}}).encode()

    def send(nonce: str, body: bytes = raw) -> httpx.Response:
        return client.post("/v1/envelopes", content=body, headers={
            "Reach-Key": "tiny", "Reach-Signature": sign(b"s2", body, nonce=nonce)})

    assert send("n-accepted-01").status_code == 202
    assert send("n-over-quota").status_code == 429
    assert send("n-malformed-1", b'{"capability": 7}').status_code == 400
    assert send("n-accepted-01").json()["error"] == "replay", "a replay never frees the original's nonce"
    assert {n for _, n in fakes.nonces.seen} == {"n-accepted-01", "n-over-quota"}


def test_a_400_that_time_or_an_operator_can_change_keeps_its_nonce(fakes: Fakes) -> None:
    """Issue 37, L4: a 400 the broker decides (a topic's max.message.bytes), a missing push topic decides, or the
    message's current question decides gave its nonce back, so the same signed bytes passed once the broker, the
    operator or the next question let them: a captured request could be replayed. Each keeps its nonce now; the
    same bytes under a fresh nonce show that they would pass later."""
    import dataclasses

    from reach.a2a.pushbook import MemoryPushBook
    from reach.kafka import codec
    from tests.unit.gateway.test_input_route import INBOX, waiting_row

    def send(client: TestClient, nonce: str, body: dict[str, Any], path: str = "/v1/envelopes") -> httpx.Response:
        raw = json.dumps(body).encode()
        return client.post(path, content=raw, headers={"Reach-Key": "key1", "Reach-Signature": sign(
            b"secret-1", raw, target=path, nonce=nonce)})

    echo = {"capability": "demo.echo", "payload": {"text": "x"}}
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()))
    fakes.publisher.refuse = True
    assert send(client, "n-broker-refused", echo).json()["error"] == "refused_by_broker"
    fakes.publisher.refuse = False  # the operator raised the topic's max.message.bytes
    assert send(client, "n-broker-refused", echo).json()["error"] == "replay"
    assert send(client, "n-broker-later", echo).status_code == 202

    progress = {**echo, "callback": "https://me.example/p", "callback_progress": True}
    assert send(client, "n-progress-off-1", progress).json()["error"] == "progress_off"
    with_push = TestClient(build_gateway(dataclasses.replace(fakes.deps(), push=MemoryPushBook()), HttpSettings(),
                                         closure=ClosureSettings()))  # the operator created the push topic
    assert send(with_push, "n-progress-off-1", progress).json()["error"] == "replay"
    assert send(with_push, "n-progress-later", progress).status_code == 202

    asking = new_envelope("demo.interview", {}, tenant="acme")
    fakes.turns.inbox[INBOX] = codec.encode(asking)
    fakes.status.rows[asking.message_id] = [waiting_row(asking.message_id, input={
        **waiting_row("")["input"], "answer_schema": json.dumps({"type": "object", "required": ["city"]})})]
    mid, path = asking.message_id, f"/v1/messages/{asking.message_id}:input"
    answer = {"message_id": mid, "answer": {"name": "Ada"}}
    assert send(client, "n-invalid-answer", answer, path).json()["error"] == "invalid_answer"
    fakes.status.rows[mid] = [waiting_row(mid)]  # the next question asks for a name: the same answer fits it
    assert send(client, "n-invalid-answer", answer, path).json()["error"] == "replay"
    assert send(client, "n-answer-later", answer, path).status_code == 202
    assert {"n-broker-refused", "n-progress-off-1", "n-invalid-answer"} <= {n for _, n in fakes.nonces.seen}
    assert send(client, "n-bad-json-1", {"capability": 7}).status_code == 400  # decided by its bytes: given back
    assert ("app1", "n-bad-json-1") not in fakes.nonces.seen


def test_a_request_carries_its_budget_and_a_bad_one_is_a_400(client: TestClient, fakes: Fakes) -> None:
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "hi"}, "max_tokens": 250,
                                          "max_cost": 0.25})
    assert resp.status_code == 202, resp.text
    [envelope] = fakes.publisher.sent
    assert (envelope.max_tokens, envelope.max_cost_micros) == (250, 250_000)
    for bad, field in (({"max_tokens": -1}, "max_tokens"), ({"max_cost": -0.5}, "max_cost"),
                       ({"max_cost": 0.0000001}, "max_cost")):
        refused = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "hi"}, **bad})
        assert refused.status_code == 400 and field in refused.json()["message"], refused.text
