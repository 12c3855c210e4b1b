"""The gateway's /mcp over in-memory fakes, driven by the official `mcp` SDK client on a loopback uvicorn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from reach.a2a.bearer import a2a_token
from reach.callers import KeyEntry
from reach.envelopes import now_ms
from reach.gateway.httpsettings import HttpSettings
from reach.records import Envelope, ErrorInfo, Receipt, Status
from tests.unit.gateway.fakes import Fakes, app, served

BEARER1 = "Bearer " + a2a_token("key1", b"secret-1")
NARROW = KeyEntry("key2", app("app2", capabilities=("demo.echo",)), b"secret-2")
ACCEPT = {"Accept": "application/json, text/event-stream"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def answering(fakes: Fakes) -> None:
    """Every published envelope completes with its payload echoed; a payload {"fail": ...} fails."""

    def on_publish(env: Envelope) -> None:
        failing = b'"fail"' in env.payload
        receipt = Receipt(message_id=env.message_id, trace_id=env.trace_id, tenant=env.tenant,
                          capability=env.capability, status=Status.FAILED if failing else Status.COMPLETED,
                          at=now_ms(), agent_id="agent://t", instance_id="i1",
                          error=ErrorInfo(kind="BUSINESS", code="NOPE", message="asked to fail") if failing else None,
                          result=None if failing else env.payload)
        asyncio.get_running_loop().call_soon(fakes.replies.deliver, receipt)

    fakes.publisher.on_publish = on_publish


@asynccontextmanager
async def gateway(fakes: Fakes) -> AsyncIterator[str]:
    async with served(fakes, HttpSettings()) as base:
        yield base + "/mcp"


@asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(10))
    async with http, streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as client:
        await client.initialize()
        yield client


def run(scenario: Callable[[str, Fakes], Awaitable[None]]) -> Fakes:
    fakes = Fakes()
    fakes.directory.keys[NARROW.key_id] = NARROW
    answering(fakes)

    async def main() -> None:
        async with gateway(fakes) as url:
            await asyncio.wait_for(scenario(url, fakes), 30)

    asyncio.run(main())
    return fakes


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def test_tools_list_and_call_through_the_door() -> None:
    async def scenario(url: str, fakes: Fakes) -> None:
        async with session(url, a2a_token("key1", b"secret-1")) as client:
            (tool,) = (await client.list_tools()).tools
            assert tool.name == "demo.echo" and tool.input_schema["required"] == ["text"]
            done = await client.call_tool("demo.echo", {"text": "hi"})
            assert done.is_error is False and done.structured_content == {"text": "hi"}
            bad = await client.call_tool("demo.echo", {"text": 1})
            assert bad.is_error is True and text(bad).startswith("invalid_payload:") and "text" in text(bad)
            failed = await client.call_tool("demo.echo", {"text": "x", "fail": True})
            assert failed.is_error is True and "BUSINESS/NOPE: asked to fail" in text(failed)

    fakes = run(scenario)
    sent = fakes.publisher.sent
    assert len(sent) == 2  # the contract violation never reached the bus
    assert {e.tenant for e in sent} == {"acme"} and {e.source for e in sent} == {"gateway:app1"}
    assert all(e.reply_to == fakes.replies.topic for e in sent)


def test_an_idempotency_key_in_meta_answers_a_repeat_from_the_first_call() -> None:
    async def scenario(url: str, fakes: Fakes) -> None:
        async with session(url, a2a_token("key1", b"secret-1")) as client:
            meta: Any = {"agent-reach/idempotency_key": "order-7"}
            first = await client.call_tool("demo.echo", {"text": "once"}, meta=meta)
            row = {"message_id": fakes.publisher.sent[0].message_id, "trace_id": "t", "status": "COMPLETED",
                   "result": '{"text": "once"}'}
            fakes.status.rows[row["message_id"]] = [row]
            again = await client.call_tool("demo.echo", {"text": "once"}, meta=meta)
            assert first.structured_content == again.structured_content == {"text": "once"}
            assert (again.meta or {})["agent-reach/message_id"] == row["message_id"]

    assert len(run(scenario).publisher.sent) == 1


def test_an_app_sees_only_its_capabilities_and_never_anothers_session() -> None:
    async def scenario(url: str, fakes: Fakes) -> None:
        fakes.catalog.capabilities.append(fakes.catalog.capabilities[0].model_copy(update={"name": "demo.other"}))
        async with session(url, a2a_token("key2", b"secret-2")) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["demo.echo"]
            refused = await client.call_tool("demo.other", {"text": "x"})
            assert refused.is_error is True and text(refused).startswith("unknown_tool:")
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.post(url, json=INIT, headers={**ACCEPT, "Authorization": BEARER1})
            session_id = opened.headers["mcp-session-id"]
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            stolen = await http.post(url, json=listing, headers={
                **ACCEPT, "Authorization": "Bearer " + a2a_token("key2", b"secret-2"), "Mcp-Session-Id": session_id,
                "Mcp-Protocol-Version": "2025-11-25"})
            assert stolen.status_code == 404  # a session belongs to the app that opened it
            anonymous = await http.post(url, json=listing, headers={**ACCEPT, "Mcp-Session-Id": session_id})
            assert anonymous.status_code == 401

    run(scenario)


def test_a_body_over_the_limit_is_refused_unread() -> None:
    async def scenario(url: str, fakes: Fakes) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            huge = b"{" + b" " * (HttpSettings().max_body_bytes + 10) + b"}"
            answer = await http.post(url, content=huge, headers={**ACCEPT, "Content-Type": "application/json",
                                                                 "Authorization": BEARER1})
            assert answer.status_code == 413

    run(scenario)


def test_a_cancel_the_cancels_producer_refuses_is_refused_without_its_error_text() -> None:
    import pytest

    from reach.gateway import checks
    from reach.gateway.intake import Admission
    from reach.gateway.metrics import GatewayMetrics
    from reach.gateway.routes_mcp import AdmissionHost
    from reach.mcp.ports import Refused

    host = AdmissionHost(Admission(Fakes().deps(), HttpSettings(), GatewayMetrics()), None)

    async def failing(app: Any, message_id: str) -> None:
        raise checks.Refusal(503, "unavailable", "KafkaError{code=_MSG_TIMED_OUT}", "retry in a few seconds")

    host._cancel = failing
    with pytest.raises(Refused) as refused:
        asyncio.run(host.cancel(app(), "m1"))
    assert (refused.value.status, refused.value.error) == (503, "unavailable")
    assert "Kafka" not in refused.value.message


def test_a_repeated_idempotency_key_waits_on_the_status_table_only_in_a_wait_slot_of_the_app() -> None:
    import pytest

    from reach.gateway.intake import Admission
    from reach.gateway.metrics import GatewayMetrics
    from reach.gateway.routes_mcp import AdmissionHost
    from reach.mcp.ports import PENDING, Refused

    fakes = Fakes()
    admission = Admission(fakes.deps(), HttpSettings(waits_per_app=1), GatewayMetrics())
    host, caller = AdmissionHost(admission, None), app()

    async def scenario() -> None:
        first = await host.send(caller, capability="demo.echo", payload={"text": "x"}, idempotency_key="k")
        first.forget()
        again = await host.send(caller, capability="demo.echo", payload={"text": "x"}, idempotency_key="k")
        assert again.message_id == first.message_id
        admission.gate.waits.take(caller)  # the app holds its one wait slot (a /v1/invoke waiting)
        with pytest.raises(Refused) as refused:
            await again.ended(0.05)
        assert refused.value.status == 429 and first.message_id in refused.value.message
        admission.gate.waits.give_back(caller)
        assert (await again.ended(0.05)).status == PENDING, "with a slot free it reads the status table"

    asyncio.run(scenario())
