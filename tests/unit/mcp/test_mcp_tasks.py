"""The Tasks extension (2026-07-28) at /mcp, driven by the official `mcp` SDK Client over the endpoint's ASGI app and an
in-memory Host: a long call becomes a task, tasks/get maps the status table, tasks/update answers a question,
tasks/cancel cancels, and an app reads and cancels only its own tasks (reach.mcp.tasks, reach.mcp.server)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from reach.callers import CallerApp
from reach.mcp import server as mcp_server
from reach.mcp import tasks
from reach.mcp.ports import Ended, Refused
from tests.unit.mcp.test_mcp_server import APP, NAME, FakeHost, FakePending

OTHER = CallerApp(app_id="a2", name="a2", tenant="acme", capabilities=(), rate=10, burst=10)  # same tenant
MODERN = "2026-07-28"


def host_of() -> FakeHost:
    return FakeHost(apps={"Bearer a1": APP, "Bearer a2": OTHER}, pending=FakePending(message_id="m1"))


@contextlib.asynccontextmanager
async def client(endpoint: mcp_server.McpEndpoint, token: str, *extensions: Any) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=endpoint), headers={"Authorization": token},
                              timeout=httpx2.Timeout(10))
    async with http, Client(streamable_http_client("http://gw/mcp", http_client=http),
                            extensions=list(extensions)) as made:
        assert made.protocol_version == MODERN
        yield made


def run(endpoint: mcp_server.McpEndpoint, scenario: Any) -> Any:
    async def inside() -> Any:
        async with endpoint.run():
            return await asyncio.wait_for(scenario(), 30)

    return asyncio.run(inside())


def test_a_long_call_is_a_task_the_official_client_polls_to_its_result() -> None:
    host = host_of()
    endpoint = mcp_server.McpEndpoint(host)
    seen: list[str] = []

    async def scenario() -> types.CallToolResult:
        async with client(endpoint, "Bearer a1", tasks.TasksClient(on_task=seen.append)) as made:
            assert tasks.EXTENSION in (made.server_capabilities.extensions or {}), "server/discover declares it"
            call = asyncio.ensure_future(made.call_tool("demo.greet", {"name": "Ada"}))
            while not seen:
                await asyncio.sleep(0.01)
            host.rows["m1"] = Ended("m1", "t1", "STARTED")
            await asyncio.sleep(0.1)
            assert not call.done(), "working: the client keeps polling"
            host.rows["m1"] = Ended("m1", "t1", "COMPLETED", {"greeting": "hello Ada"}, updated_at=1_800_000_000_000)
            return await call

    result = run(endpoint, scenario)
    assert result.is_error is False and result.structured_content == {"greeting": "hello Ada"}
    assert host.sent == [{"capability": "demo.greet", "payload": {"name": "Ada"}, "key": None}]
    assert host.pending.forgotten, "the call stopped waiting on the reply topic once it became a task"
    seal = tasks.TaskSeal(host.sealer)
    assert seen[0] != "m1" and seal.opened("a1", seen[0]) is not None, "the task id is sealed, not the message id"
    assert seal.opened("a1", seen[0])[0] == "m1" and seal.opened("a2", seen[0]) is None, "sealed for its app"


def test_a_client_that_does_not_declare_tasks_gets_the_result_itself() -> None:
    host = host_of()
    host.pending = FakePending(message_id="m1", outcome=None)
    endpoint = mcp_server.McpEndpoint(host)

    async def scenario() -> types.CallToolResult:
        async with client(endpoint, "Bearer a1") as made:
            call = asyncio.ensure_future(made.call_tool("demo.greet", {"name": "Ada"}))
            await asyncio.sleep(0.3)  # well past tasks.after_s: no task for a client that did not declare them
            host.pending.outcome = Ended("m1", "t1", "COMPLETED", {"greeting": "hi"})
            return await call

    host.pending.ended = _released(host.pending)  # type: ignore[method-assign]
    assert run(endpoint, scenario).structured_content == {"greeting": "hi"}


def _released(pending: FakePending) -> Any:
    async def ended(timeout_s: float) -> Ended:
        while pending.outcome is None:
            await asyncio.sleep(0.01)
        return pending.outcome

    return ended


def test_a_question_is_input_required_and_tasks_update_answers_it() -> None:
    host = host_of()
    endpoint = mcp_server.McpEndpoint(host)
    asked: list[str] = []

    async def answer(params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    taken = host.answer

    async def next_turn(app: CallerApp, message_id: str, given: Any) -> FakePending:
        pending = await taken(app, message_id, given)
        host.rows["m1"] = Ended("m1", "t1", "COMPLETED", {"greeting": "Hi, Ada!"}, generation=2)
        return pending

    host.answer = next_turn  # type: ignore[method-assign,assignment]

    host.rows["m1"] = Ended("m1", "t1", "INPUT_REQUIRED", question="Who?", answer_schema=NAME, generation=1)

    async def scenario() -> types.CallToolResult:
        async with client(endpoint, "Bearer a1", tasks.TasksClient(answer=answer)) as made:
            return await made.call_tool("demo.greet", {})

    result = run(endpoint, scenario)
    assert result.structured_content == {"greeting": "Hi, Ada!"} and asked == ["Who?"]
    assert host.answered == [("m1", {"name": "Ada"})], "the same message's next turn"


def test_an_ending_that_is_no_success_is_a_completed_task_with_a_tool_error_and_canceled_is_cancelled() -> None:
    settings = tasks.TaskSettings()
    failed = tasks.detailed("t", Ended("m1", "t1", "FAILED", reason="m1 ended FAILED: business/OUT"), 0, settings)
    assert failed.status == "completed" and failed.result is not None and failed.result["isError"] is True
    cancelled = tasks.detailed("t", Ended("m1", "t1", "CANCELED", reason="stopped"), 0, settings)
    assert (cancelled.status, cancelled.result) == ("cancelled", None)
    fresh = tasks.detailed("t", None, 0, settings)
    assert fresh.status == "working" and fresh.created_at == "1970-01-01T00:00:00.000Z"


def test_another_app_cannot_get_update_or_cancel_a_task_and_its_owner_can_cancel() -> None:
    host = host_of()
    endpoint = mcp_server.McpEndpoint(host)
    made_ids: list[str] = []
    host.rows["m1"] = Ended("m1", "t1", "STARTED")

    async def scenario() -> None:
        async with client(endpoint, "Bearer a1", tasks.TasksClient(on_task=made_ids.append)) as owner:
            call = asyncio.ensure_future(owner.call_tool("demo.greet", {"name": "Ada"}))
            while not made_ids:
                await asyncio.sleep(0.01)
            task_id = made_ids[0]
            async with client(endpoint, "Bearer a2", tasks.TasksClient()) as other:
                for request in (tasks.GetTaskRequest(params=tasks.TaskParams(task_id=task_id)),
                                tasks.CancelTaskRequest(params=tasks.TaskParams(task_id=task_id)),
                                tasks.UpdateTaskRequest(params=tasks.UpdateTaskParams(task_id=task_id,
                                                                                      input_responses={}))):
                    with pytest.raises(MCPError) as refused:
                        await other.session.send_request(request, tasks.Acknowledged)
                    assert refused.value.error.code == types.INVALID_PARAMS
                    assert "Task not found" in refused.value.error.message
                with pytest.raises(MCPError, match="Task not found"):  # a forged id is the same
                    await other.session.send_request(tasks.GetTaskRequest(params=tasks.TaskParams(task_id="m1")),
                                                     tasks.GetTaskResult)
            assert host.cancelled == [], "another app's cancel cancels nothing"
            call.cancel()  # the owner's client sends tasks/cancel for its task
            with contextlib.suppress(asyncio.CancelledError):
                await call
            for _ in range(100):
                if host.cancelled:
                    break
                await asyncio.sleep(0.01)

    run(endpoint, scenario)
    assert host.cancelled == [("a1", "m1")]


def test_tasks_methods_need_the_declared_extension_and_the_routing_header() -> None:
    host = host_of()
    endpoint = mcp_server.McpEndpoint(host)
    task_id = tasks.TaskSeal(host.sealer).task_id("a1", "m1", tasks.now_ms())

    async def scenario() -> None:
        async with client(endpoint, "Bearer a1") as plain:  # no Tasks extension declared
            with pytest.raises(MCPError) as missing:
                await plain.session.send_request(tasks.GetTaskRequest(params=tasks.TaskParams(task_id=task_id)),
                                                 tasks.GetTaskResult)
            assert missing.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
        async with client(endpoint, "Bearer a1", tasks.TasksClient()) as declared:
            got = await declared.session.send_request(
                tasks.GetTaskRequest(params=tasks.TaskParams(task_id=task_id)), tasks.GetTaskResult)
            assert got.status == "working" and got.task_id == task_id
            wrong = tasks.GetTaskRequest(params=tasks.TaskParams(task_id=task_id))
            with pytest.raises(MCPError) as mismatch:
                await _with_name(declared, wrong, "other")
            assert mismatch.value.error.code == types.HEADER_MISMATCH

    run(endpoint, scenario)


async def _with_name(made: Client, request: tasks.GetTaskRequest, name: str) -> Any:
    """Send with an Mcp-Name header that is not the task id (the SDK would send the right one)."""
    session: Any = made.session
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    opts.setdefault("headers", {})["mcp-name"] = name
    return await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)



class _Failing(Exception):
    pass


def test_a_tasks_request_that_fails_inside_is_an_internal_error_telling_nothing_of_it() -> None:
    host = host_of()
    endpoint = mcp_server.McpEndpoint(host)
    task_id = tasks.TaskSeal(host.sealer).task_id("a1", "m1", tasks.now_ms())

    async def broken(app: CallerApp, message_id: str) -> None:
        raise _Failing("KafkaError{code=_MSG_TIMED_OUT,broker=10.0.0.7:9092}")

    async def refused(app: CallerApp, message_id: str) -> None:
        raise Refused(503, "unavailable", "the cancel could not be sent", "retry in a few seconds")

    async def scenario() -> None:
        async with client(endpoint, "Bearer a1", tasks.TasksClient()) as made:
            request = tasks.CancelTaskRequest(params=tasks.TaskParams(task_id=task_id))
            for fails, shown in ((broken, "internal_error"), (refused, "unavailable: the cancel could not be sent")):
                host.cancel = fails  # type: ignore[method-assign]
                with pytest.raises(MCPError) as failed:
                    await made.session.send_request(request, tasks.Acknowledged)
                assert failed.value.error.code == types.INTERNAL_ERROR
                assert failed.value.error.message.startswith(shown) and "Kafka" not in failed.value.error.message

    run(endpoint, scenario)


def test_a_task_id_older_than_the_tasks_ttl_is_not_found() -> None:
    host = host_of()
    host.tasks = tasks.TaskSettings(after_s=0.05, poll_ms=20, ttl_ms=60_000)
    endpoint = mcp_server.McpEndpoint(host)
    seal = tasks.TaskSeal(host.sealer)
    fresh, stale = seal.task_id("a1", "m1", tasks.now_ms()), seal.task_id("a1", "m1", tasks.now_ms() - 61_000)

    async def scenario() -> None:
        async with client(endpoint, "Bearer a1", tasks.TasksClient()) as made:
            got = await made.session.send_request(tasks.GetTaskRequest(params=tasks.TaskParams(task_id=fresh)),
                                                  tasks.GetTaskResult)
            assert got.status == "working"
            for request in (tasks.GetTaskRequest(params=tasks.TaskParams(task_id=stale)),
                            tasks.CancelTaskRequest(params=tasks.TaskParams(task_id=stale))):
                with pytest.raises(MCPError) as expired:
                    await made.session.send_request(request, tasks.Acknowledged)
                assert expired.value.error.code == types.INVALID_PARAMS
                assert expired.value.error.message == "Failed to retrieve task: Task not found"
        assert host.cancelled == [], "an expired task's cancel cancels nothing"

    run(endpoint, scenario)


def test_the_tasks_client_polls_no_faster_than_its_floor_whatever_the_server_asks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    handle = tasks.created("t1", "working", tasks.now_ms(), tasks.TaskSettings(poll_ms=0))
    done = types.CallToolResult(content=[types.TextContent(text="ok")]).model_dump(by_alias=True, mode="json")
    answers = [tasks.GetTaskResult(task_id="t1", status="working", created_at="x", last_updated_at="x", ttl_ms=None,
                                   poll_interval_ms=interval) for interval in (1, 10)]
    answers.append(tasks.GetTaskResult(task_id="t1", status="completed", created_at="x", last_updated_at="x",
                                       ttl_ms=None, result=done))

    class Session:
        async def send_request(self, request: Any, kind: Any) -> Any:
            return answers.pop(0)

    class Context:
        session = Session()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(tasks.anyio, "sleep", sleep)
    result = asyncio.run(tasks.TasksClient()._resolve(handle, Context()))  # type: ignore[arg-type]
    assert result.is_error is not True and slept == [0.25, 0.25]
