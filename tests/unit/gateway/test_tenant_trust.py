"""Issue 37: no app can starve, flood or charge another through push configs, MCP, A2A streams, traces, /metrics or a
replayed refusal. The gateway runs in-process on a real uvicorn (loopback) over the in-memory fakes; callers are
httpx, the official a2a-sdk client and raw MCP JSON-RPC. Each test failed on main at 06cad0c."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from a2a.client import A2AClientError, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import ListTasksRequest, SubscribeToTaskRequest, TaskPushNotificationConfig
from a2a.utils.errors import A2AError
from pydantic import SecretStr

from reach.a2a.bearer import a2a_token
from reach.a2a.pushbook import MemoryPushBook
from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import FakeQuotas, Fakes, app, served, sign
from tests.unit.gateway.test_a2a_routes import Bearer, Following, send_request

TOKEN1 = a2a_token("key1", b"secret-1")
NARROW = KeyEntry("key2", app("app2", capabilities=("demo.echo",)), b"secret-2")
TOKEN2 = a2a_token("key2", b"secret-2")
ACCEPT = {"Accept": "application/json, text/event-stream"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
RECEIVER = "https://receiver.example/hook"


def signed(secret: bytes, body: bytes, key: str, *, method: str = "POST", target: str = "/v1/envelopes",
           nonce: str | None = None) -> dict[str, str]:
    return {"Reach-Key": key, "Reach-Signature": sign(secret, body, method=method, target=target, nonce=nonce)}


def test_a_request_refused_over_quota_cannot_be_replayed_once_the_quota_refills() -> None:
    """Finding 6: the nonce of a 429 was given back, so the captured request passed when replayed later."""
    now = [1000.0]
    fakes = Fakes(quotas=FakeQuotas(clock=lambda: now[0]))
    fakes.directory.keys["tiny"] = KeyEntry("tiny", app("tiny", rate=1.0, burst=1), b"s2")
    body = json.dumps({"capability": "demo.echo", "payload": {"text": "x"}}).encode()

    async def main() -> None:
        async with served(fakes, HttpSettings()) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.post("/v1/envelopes", content=body, headers=signed(b"s2", body, "tiny"))).status_code \
                == 202
            captured = signed(b"s2", body, "tiny")
            refused = await http.post("/v1/envelopes", content=body, headers=captured)
            assert refused.status_code == 429
            now[0] += 10  # the bucket is full again
            replayed = await http.post("/v1/envelopes", content=body, headers=captured)
            assert (replayed.status_code, replayed.json()["error"]) == (401, "replay")

    asyncio.run(main())
    assert len(fakes.publisher.sent) == 1


def test_metrics_need_the_token_or_a_loopback_peer() -> None:
    """Finding 9: /metrics on the public port listed app ids, tenants, traffic and spend to anyone."""
    fakes = Fakes()

    async def main() -> None:
        async with served(fakes, HttpSettings(metrics_token=SecretStr("m-token"))) as base, \
                httpx.AsyncClient(base_url=base, timeout=10) as http:
            await http.get("/v1/messages/x", headers=signed(b"secret-1", b"", "key1", method="GET",
                                                              target="/v1/messages/x"))
            anonymous = await http.get("/metrics")
            assert anonymous.status_code == 401 and "app1" not in anonymous.text
            assert anonymous.headers["www-authenticate"].startswith("Bearer")
            wrong = await http.get("/metrics", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            scraped = await http.get("/metrics", headers={"Authorization": "Bearer m-token"})
            assert scraped.status_code == 200 and 'app="app1"' in scraped.text
        async with served(fakes, HttpSettings()) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/metrics")).status_code == 200, "no token: a loopback scraper still reads them"
        gateway = build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings())
        remote = httpx.ASGITransport(app=gateway, client=("203.0.113.7", 4000))
        async with httpx.AsyncClient(transport=remote, base_url="http://gw") as http:
            assert (await http.get("/metrics")).status_code == 401, "no token: a remote peer gets nothing"

    asyncio.run(main())


def test_a_trace_read_reads_a_bounded_number_of_rows_and_pays_a_read_token_per_25() -> None:
    """Finding 10: one read token made the gateway read every member of a trace (up to 10,000 per partition)."""
    fakes = Fakes()
    ids = [f"m{i}" for i in range(2000)]
    fakes.status.traces["t1"] = ids
    for mid in ids:
        fakes.status.rows[mid] = [{"message_id": mid, "tenant": "acme", "status": "COMPLETED"}]

    async def main() -> None:
        async with served(fakes, HttpSettings(trace_rows=100)) as base, \
                httpx.AsyncClient(base_url=base, timeout=10) as http:
            answer = await http.get("/v1/traces/t1", headers=signed(b"secret-1", b"", "key1", method="GET",
                                                                      target="/v1/traces/t1"))
            assert answer.status_code == 200
            assert answer.json() == {"trace_id": "t1", "message_ids": ids[:100], "truncated": True}

    asyncio.run(main())
    assert fakes.status.reads == 100
    assert fakes.quotas.read_tokens == 4  # the request's own and one per 25 rows past the first 25


def test_a_trace_read_is_refused_when_the_read_bucket_cannot_pay_for_its_rows() -> None:
    fakes = Fakes(quotas=FakeQuotas(read_rate=0.001, read_burst=3))
    ids = [f"m{i}" for i in range(100)]
    fakes.status.traces["t1"] = ids
    for mid in ids:
        fakes.status.rows[mid] = [{"message_id": mid, "tenant": "acme", "status": "COMPLETED"}]

    async def main() -> None:
        async with served(fakes, HttpSettings()) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
            answer = await http.get("/v1/traces/t1", headers=signed(b"secret-1", b"", "key1", method="GET",
                                                                      target="/v1/traces/t1"))
            assert answer.status_code == 429 and answer.json()["error"] == "quota_exceeded"

    asyncio.run(main())
    assert fakes.status.reads == 0


async def a2a(base: str, token: str, *, streaming: bool = False) -> Any:
    http = httpx.AsyncClient(timeout=10)
    factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
    return await factory.create_from_url(base, interceptors=[Bearer(token)])


def test_an_a2a_push_config_needs_the_webhook_right_and_takes_a_webhook_quota_token() -> None:
    """Finding 1: an app limited to demo.echo kept push configs to any public URL (each status change a signed
    webhook), with no allow-list, quota or spend check."""
    fakes = Fakes()
    fakes.status = Following(fakes)
    fakes.directory.keys[NARROW.key_id] = NARROW
    book = MemoryPushBook()

    async def main() -> None:
        async with served(fakes, HttpSettings(sse_poll=0.01, sse_find=0.05, invoke_timeout_ms=2_000), push=book,
                          status=fakes.status, namespace="reach") as base:
            narrow = await a2a(base, TOKEN2)
            [done] = [e async for e in narrow.send_message(send_request("mine"))]
            task_id = done.task.id
            with pytest.raises(A2AError, match="channel.webhook"):
                await narrow.create_task_push_notification_config(TaskPushNotificationConfig(task_id=task_id,
                                                                                              url=RECEIVER))
            assert book.get(task_id) is None
            with_config = send_request("with-config")
            with_config.configuration.task_push_notification_config.CopyFrom(TaskPushNotificationConfig(url=RECEIVER))
            with pytest.raises(A2AError, match="channel.webhook"):
                [e async for e in narrow.send_message(with_config)]
            assert [e.payload for e in fakes.publisher.sent] == [b'{"text":"mine"}'], "refused before it was sent"
            wide = await a2a(base, TOKEN1)
            [done] = [e async for e in wide.send_message(send_request("theirs"))]
            before = list(fakes.quotas.capabilities)
            await wide.create_task_push_notification_config(TaskPushNotificationConfig(task_id=done.task.id,
                                                                                        url=RECEIVER))
            assert fakes.quotas.capabilities[len(before):] == ["channel.webhook"]

    asyncio.run(main())


def test_a_push_config_over_the_apps_quota_is_429() -> None:
    fakes = Fakes()
    fakes.status = Following(fakes)
    fakes.directory.keys["key3"] = KeyEntry("key3", app("app3", rate=0.001, burst=1), b"secret-3")
    book = MemoryPushBook()

    async def main() -> None:
        async with served(fakes, HttpSettings(sse_poll=0.01, sse_find=0.05, invoke_timeout_ms=2_000), push=book,
                          status=fakes.status, namespace="reach") as base:
            client = await a2a(base, a2a_token("key3", b"secret-3"))
            [done] = [e async for e in client.send_message(send_request("one"))]  # the one token
            with pytest.raises(A2AClientError, match="429"):
                await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=done.task.id,
                                                                                              url=RECEIVER))
            assert book.get(done.task.id) is None

    asyncio.run(main())


def test_a2a_streams_share_the_apps_stream_slots_with_v1_event_streams() -> None:
    """Finding 3: SubscribeToTask and streaming sends were outside the per-app stream cap of /v1's SSE."""
    fakes = Fakes()
    fakes.status.rows["m1"] = [{"message_id": "m1", "trace_id": "t", "tenant": "acme", "status": "STARTED",
                                "updated_at": 1, "timeline": [{"status": "STARTED", "attempt": 1, "at": 1}]}]
    settings = HttpSettings(sse_per_app=1, sse_poll=0.01, sse_find=0.05, sse_max=30)

    async def main() -> None:
        async with served(fakes, settings, status=fakes.status) as base, \
                httpx.AsyncClient(base_url=base, timeout=10) as http:
            target = "/v1/messages/m1/events"
            async with http.stream("GET", target, headers=signed(b"secret-1", b"", "key1", method="GET",
                                                                 target=target)) as held:
                assert held.status_code == 200
                client = await a2a(base, TOKEN1, streaming=True)
                with pytest.raises(A2AClientError, match="429"):
                    [e async for e in client.subscribe(SubscribeToTaskRequest(id="m1"))]
                with pytest.raises(A2AClientError, match="429"):
                    [e async for e in client.send_message(send_request("streamed"))]
                assert fakes.publisher.sent == [], "a stream refused sends nothing"

    asyncio.run(main())


def test_a_list_of_tasks_pays_for_the_page_of_rows_it_reads() -> None:
    """A ListTasks page reads a status row per task (up to 100): it pays one read token per 25, as a trace does."""
    fakes = Fakes(quotas=FakeQuotas(read_rate=0.001, read_burst=5))

    async def main() -> None:
        async with served(fakes, HttpSettings(), status=fakes.status) as base:
            client = await a2a(base, TOKEN1)
            await client.list_tasks(ListTasksRequest(page_size=100))  # 4 of the 5 tokens
            with pytest.raises(A2AClientError, match="429"):
                await client.list_tasks(ListTasksRequest(page_size=100))

    asyncio.run(main())


def mcp_post(http: httpx.AsyncClient, url: str, token: str, body: dict[str, Any],
             session: str | None = None, **headers: str) -> Awaitable[httpx.Response]:
    more = {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"} if session else {}
    return http.post(url, json=body, headers={**ACCEPT, "Authorization": f"Bearer {token}", **more, **headers})


def rpc(answer: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer, sent as JSON or as the one event of an event stream."""
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = next(line[5:] for line in answer.text.splitlines() if line.startswith("data:"))
        return dict(json.loads(data))
    return dict(answer.json())


def mcp_run(fakes: Fakes, settings: HttpSettings,
            scenario: Callable[[httpx.AsyncClient, str], Awaitable[None]]) -> None:
    async def main() -> None:
        async with served(fakes, settings) as base, httpx.AsyncClient(timeout=10) as http:
            await scenario(http, base)

    asyncio.run(main())


def test_one_app_cannot_hold_every_mcp_session() -> None:
    """Finding 2: the session cap was per gateway; one narrow key opened them all and every other tenant got 503."""
    fakes = Fakes()
    fakes.directory.keys[NARROW.key_id] = NARROW

    async def scenario(http: httpx.AsyncClient, base: str) -> None:
        opened = [await mcp_post(http, base + "/mcp", TOKEN2, INIT) for _ in range(3)]
        assert [r.status_code for r in opened] == [200, 200, 429]
        assert opened[2].json()["error"] == "too_many_sessions"
        other = await mcp_post(http, base + "/mcp", TOKEN1, INIT)
        assert other.status_code == 200, "another app still opens a session"
        ended = await http.delete(base + "/mcp", headers={"Authorization": f"Bearer {TOKEN2}",
                                                          "Mcp-Session-Id": opened[0].headers["mcp-session-id"]})
        assert ended.status_code == 200
        assert (await mcp_post(http, base + "/mcp", TOKEN2, INIT)).status_code == 200, "a slot ended is free again"

    mcp_run(fakes, HttpSettings(mcp_sessions_per_app=2, mcp_sessions=10), scenario)


def test_opening_an_mcp_session_and_listing_tools_take_read_tokens() -> None:
    """Finding 2: initialize and tools/list were unmetered."""
    fakes = Fakes(quotas=FakeQuotas(read_rate=0.001, read_burst=2))

    async def scenario(http: httpx.AsyncClient, base: str) -> None:
        opened = await mcp_post(http, base + "/mcp", TOKEN1, INIT)
        session = opened.headers["mcp-session-id"]
        await mcp_post(http, base + "/mcp", TOKEN1, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                       session)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        first = await mcp_post(http, base + "/mcp", TOKEN1, listing, session)
        assert [t["name"] for t in rpc(first)["result"]["tools"]] == ["demo.echo"]
        second = await mcp_post(http, base + "/mcp", TOKEN1, listing, session)
        assert "quota_exceeded" in rpc(second)["error"]["message"]
        refused = await mcp_post(http, base + "/mcp", TOKEN1, INIT)
        assert (refused.status_code, refused.json()["error"]) == (429, "quota_exceeded")

    mcp_run(fakes, HttpSettings(), scenario)


def test_mcp_401s_name_the_protected_resource_metadata_and_tokens_are_checked_against_this_gateway() -> None:
    """The MCP authorization specification: protected resource metadata, 401 + WWW-Authenticate pointing at it,
    tokens for this server only."""
    fakes = Fakes()

    async def scenario(http: httpx.AsyncClient, base: str) -> None:
        metadata = (await http.get(base + "/.well-known/oauth-protected-resource/mcp")).json()
        assert metadata["resource"] == base + "/mcp" and metadata["bearer_methods_supported"] == ["header"]
        assert metadata["authorization_servers"] == [base]
        assert (await http.get(base + "/.well-known/oauth-protected-resource")).json() == metadata
        anonymous = await http.post(base + "/mcp", json=INIT, headers=ACCEPT)
        assert anonymous.status_code == 401
        challenge = anonymous.headers["www-authenticate"]
        assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
        assert "invalid_token" not in challenge
        elsewhere = a2a_token("key-of-another-gateway", uuid.uuid4().bytes)  # a key this gateway never issued
        foreign = await mcp_post(http, base + "/mcp", elsewhere, INIT)
        assert foreign.status_code == 401 and 'error="invalid_token"' in foreign.headers["www-authenticate"]

    mcp_run(fakes, HttpSettings(), scenario)


def test_mcp_refuses_a_browser_origin_other_than_the_gateways_own_or_an_allowed_one() -> None:
    fakes = Fakes()

    async def scenario(http: httpx.AsyncClient, base: str) -> None:
        evil = await mcp_post(http, base + "/mcp", TOKEN1, INIT, Origin="http://evil.example")
        assert (evil.status_code, evil.json()["error"]) == (403, "forbidden_origin")
        assert (await mcp_post(http, base + "/mcp", TOKEN1, INIT, Origin=base)).status_code == 200
        assert (await mcp_post(http, base + "/mcp", TOKEN1, INIT, Origin="https://ide.example")).status_code == 200
        assert (await mcp_post(http, base + "/mcp", TOKEN1, INIT)).status_code == 200, "no Origin: not a browser"

    mcp_run(fakes, HttpSettings(mcp_origins="https://ide.example"), scenario)


def test_a_v1_progress_callback_is_a_push_config_it_takes_a_webhook_quota_token_and_needs_the_right() -> None:
    """Second review, finding 3: `callback_progress` kept a push config (a webhook per progress chunk) without the
    token of channel.webhook's quota an A2A push config takes."""
    from fastapi.testclient import TestClient

    from tests.unit.gateway.test_service import post

    fakes, book = Fakes(), MemoryPushBook()
    fakes.directory.keys[NARROW.key_id] = NARROW
    client = TestClient(build_gateway(dataclasses.replace(fakes.deps(), directory=fakes.directory, push=book),
                                      HttpSettings(), closure=ClosureSettings()))
    body = {"capability": "demo.echo", "payload": {"text": "x"}, "callback": RECEIVER, "callback_progress": True}
    narrow = post(client, "/v1/envelopes", body, secret=b"secret-2", key="key2")
    assert narrow.status_code == 403 and "channel.webhook" in narrow.text
    assert fakes.publisher.sent == [] and book.tasks == {}  # nothing published, no push config kept
    wide = post(client, "/v1/envelopes", body)
    assert wide.status_code == 202, wide.text
    assert book.get(wide.json()["message_id"]) is not None
    assert fakes.quotas.capabilities == ["demo.echo", "channel.webhook"]  # the send's token and the push config's
