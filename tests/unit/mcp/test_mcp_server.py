"""The MCP server's call flow, tool-list watch and endpoint auth over an in-memory Host (reach.mcp.server)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import mcp_types as types
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.callers import AuthFailure, CallerApp
from reach.errors import InfraUnavailable
from reach.mcp import rounds
from reach.mcp import server as mcp_server
from reach.mcp.ports import PENDING, Ended, Refused, SessionLimits
from reach.mcp.tasks import TaskSettings
from reach.records import Capability
from reach.secretbox import SecretBox
from tests.unit.mcp.fakes import FakeConnection, FakeOutbound, context

APP = CallerApp(app_id="a1", name="a1", tenant="acme", capabilities=(), rate=10, burst=10)
GREET = Capability(name="demo.greet", version="1.0.0", input_schema='{"type": "object"}')


@dataclass
class FakePending:
    message_id: str = "m1"
    outcome: Ended | None = None
    forgotten: bool = False
    waiting: asyncio.Event = field(default_factory=asyncio.Event)

    async def ended(self, timeout_s: float) -> Ended:
        self.waiting.set()
        if self.outcome is None:  # no terminal receipt within the wait
            await asyncio.sleep(timeout_s)
            return Ended(self.message_id, "", PENDING)
        return self.outcome

    def forget(self) -> None:
        self.forgotten = True


@dataclass
class FakeHost:
    caps: list[Capability] = field(default_factory=lambda: [GREET])
    pending: FakePending = field(default_factory=FakePending)
    refuse: Exception | None = None
    sent: list[dict[str, Any]] = field(default_factory=list)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    call_timeout_s: float = 5.0
    max_body_bytes: int = 1024
    auth: CallerApp | AuthFailure | Exception = APP
    limits: SessionLimits = field(default_factory=SessionLimits)
    registry_reads: int = 0
    answered: list[tuple[str, Any]] = field(default_factory=list)
    tasks: TaskSettings = field(default_factory=lambda: TaskSettings(after_s=0.05, poll_ms=20))
    sealer: SecretBox = field(default_factory=lambda: SecretBox([SecretStr(Fernet.generate_key().decode())]))
    rows: dict[str, Ended] = field(default_factory=dict)  # what `look` answers, by message id
    apps: dict[str, CallerApp] = field(default_factory=dict)  # bearer header -> app (else `auth`)

    async def look(self, app: CallerApp, message_id: str) -> Ended | None:
        return self.rows.get(message_id)

    async def read(self, app: CallerApp) -> None:
        return None

    def open_session(self, app: CallerApp, held: int) -> None:
        return None

    def origins(self, scope: Any) -> Sequence[str]:
        return ("http://gw",)

    def resource_metadata(self, scope: Any) -> str:
        return "http://gw/.well-known/oauth-protected-resource/mcp"

    def authenticate(self, authorization: str | None) -> CallerApp | AuthFailure:
        if authorization in self.apps:
            return self.apps[authorization]
        if isinstance(self.auth, Exception):
            raise self.auth
        return self.auth

    def capabilities(self, app: CallerApp) -> Sequence[Capability]:
        self.registry_reads += 1
        return list(self.caps)

    async def send(self, app: CallerApp, *, capability: str, payload: Any, idempotency_key: str | None) -> FakePending:
        if self.refuse is not None:
            raise self.refuse
        self.sent.append({"capability": capability, "payload": payload, "key": idempotency_key})
        return self.pending

    async def cancel(self, app: CallerApp, message_id: str) -> None:
        self.cancelled.append((app.app_id, message_id))

    async def answer(self, app: CallerApp, message_id: str, answer: Any) -> FakePending:
        if self.refuse is not None:
            raise self.refuse
        self.answered.append((message_id, answer))
        return self.pending


def params(name: str = "demo.greet", arguments: dict[str, Any] | None = None,
           meta: dict[str, Any] | None = None) -> types.CallToolRequestParams:
    return types.CallToolRequestParams(name=name, arguments=arguments or {}, _meta=meta)


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def test_a_call_sends_the_arguments_and_returns_the_result() -> None:
    host = FakeHost(pending=FakePending(outcome=Ended("m1", "t1", "COMPLETED", {"ok": True})))
    result = asyncio.run(mcp_server.call(host, APP, params(arguments={"name": "ada"},
                                                           meta={mcp_server.IDEMPOTENCY_META: "k-1"})))
    assert result.structured_content == {"ok": True}
    assert host.sent == [{"capability": "demo.greet", "payload": {"name": "ada"}, "key": "k-1"}]


def test_an_unknown_tool_is_a_tool_error_and_sends_nothing() -> None:
    host = FakeHost()
    result = asyncio.run(mcp_server.call(host, APP, params("demo.nothing")))
    assert result.is_error is True and text(result).startswith("unknown_tool:") and host.sent == []


@pytest.mark.parametrize(("refusal", "expected"), [
    (Refused(422, "invalid_payload", "payload violates the input schema at name"), "invalid_payload: payload "
                                                                                   "violates the input schema at name"),
    (Refused(403, "forbidden", "app a1 may not call demo.greet"), "forbidden: app a1 may not call demo.greet"),
    (InfraUnavailable("kafka down at 10.0.0.7"), "unavailable: the bus did not answer; retry in a few seconds"),
])
def test_the_doors_refusal_is_a_tool_error(refusal: Exception, expected: str) -> None:
    result = asyncio.run(mcp_server.call(FakeHost(refuse=refusal), APP, params()))
    assert result.is_error is True and text(result) == expected


def test_a_wait_the_door_refuses_is_a_tool_error() -> None:
    class Refusing(FakePending):
        async def ended(self, timeout_s: float) -> Ended:
            raise Refused(429, "too_many_waits", "app a1 holds 32 waiting calls; the first request with this "
                          "idempotency_key is m1")

    result = asyncio.run(mcp_server.call(FakeHost(pending=Refusing()), APP, params()))
    assert result.is_error is True and text(result).startswith("too_many_waits: app a1 holds 32 waiting calls")


def test_a_call_that_waits_too_long_is_a_timeout_tool_error() -> None:
    host = FakeHost(pending=FakePending(outcome=Ended("m1", "t1", PENDING)))
    assert text(asyncio.run(mcp_server.call(host, APP, params()))).startswith("timeout:")


def test_a_cancelled_call_cancels_the_message() -> None:
    host = FakeHost()

    async def scenario() -> None:
        task = asyncio.create_task(mcp_server.call(host, APP, params()))
        await host.pending.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert host.cancelled == [("a1", "m1")] and host.pending.forgotten


def test_the_watch_notifies_a_session_whose_tools_changed() -> None:
    host = FakeHost()
    watch = mcp_server.ToolWatch(host, every_s=0.01)
    connection = FakeConnection()
    watch.watch(context(connection), APP, mcp_server.tools.fingerprint(host.caps))
    assert asyncio.run(watch.check()) == 0
    host.caps.append(Capability(name="demo.late", version="1.0.0"))
    assert asyncio.run(watch.check()) == 1 and connection.outbound.sent == ["notifications/tools/list_changed"]
    assert asyncio.run(watch.check()) == 0  # once per change
    connection.exit_stack.close()  # the session ended
    assert len(watch) == 0


def test_the_watch_reads_the_registry_once_per_app_group_not_once_per_session() -> None:
    """Issue 37, finding 2: a pass recomputed every session's tool list on the event loop."""
    host = FakeHost()
    watch = mcp_server.ToolWatch(host)
    other = CallerApp(app_id="a2", name="a2", tenant="globex", capabilities=(), rate=10, burst=10)
    connections = [FakeConnection(session_id=f"s{i}") for i in range(500)]
    for i, connection in enumerate(connections):
        watch.watch(context(connection), APP if i % 2 else other, mcp_server.tools.fingerprint(host.caps))
    assert asyncio.run(watch.check()) == 0
    assert host.registry_reads == 2  # one per (tenant, capability list), however many sessions each has
    host.caps.append(Capability(name="demo.late", version="1.0.0"))
    assert asyncio.run(watch.check()) == 500 and host.registry_reads == 4


def test_the_watch_drops_a_session_it_cannot_reach_and_skips_stateless_ones() -> None:
    host = FakeHost()
    watch = mcp_server.ToolWatch(host)
    stateless = FakeConnection(session_id=None)
    watch.watch(context(stateless), APP, ())
    assert len(watch) == 0
    gone = FakeConnection(outbound=FakeOutbound(broken=True))
    watch.watch(context(gone), APP, ())
    assert asyncio.run(watch.check()) == 0 and len(watch) == 0


@pytest.mark.parametrize(("auth", "status", "error"), [
    (AuthFailure(reason="missing Authorization header", code="missing"), 401, "missing"),
    (InfraUnavailable("the apps directory stopped"), 503, "unavailable"),
])
def test_the_endpoint_refuses_before_the_sdk_sees_the_request(auth: Any, status: int, error: str) -> None:
    endpoint = mcp_server.McpEndpoint(FakeHost(auth=auth))

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=endpoint)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})

    answer = asyncio.run(post())
    assert answer.status_code == status and answer.json()["error"] == error
    if status == 401:
        assert answer.headers["www-authenticate"].startswith("Bearer")


def test_listeners_of_the_2026_revision_hear_a_change_of_their_own_groups_tools_only() -> None:
    """subscriptions/listen (2026-07-28): one bus per (tenant, allow-list); a pass publishes ToolsListChanged on the
    bus of a group whose tool list changed, once per change, and nothing on another tenant's."""
    host = FakeHost()
    watch = mcp_server.ToolWatch(host)
    other = CallerApp(app_id="a2", name="a2", tenant="globex", capabilities=("demo.greet",), rate=10, burst=10)
    heard: dict[str, list[Any]] = {"acme": [], "globex": []}
    watch.listen.bus_for(APP).subscribe(heard["acme"].append)
    watch.listen.bus_for(other).subscribe(heard["globex"].append)
    assert asyncio.run(watch.check()) == 0, "the first pass learns each group's list"
    host.caps.append(Capability(name="demo.late", version="1.0.0"))  # globex's allow-list does not include it

    def visible(app: CallerApp) -> list[Capability]:
        return [c for c in host.caps if not app.capabilities or c.name in app.capabilities]

    host.capabilities = visible  # type: ignore[method-assign]
    assert asyncio.run(watch.check()) == 1
    assert [type(e).__name__ for e in heard["acme"]] == ["ToolsListChanged"] and heard["globex"] == []
    assert asyncio.run(watch.check()) == 0, "once per change"


def test_a_change_before_the_watchs_first_pass_is_told_to_the_first_listener() -> None:
    """The integration test's flake, found this session: the group's list was learned on the watch's first pass
    after the listen, so an agent that registered within those two seconds became the baseline and its listener
    never heard of it. The list is learned when the group's first listener comes."""
    host = FakeHost()
    watch = mcp_server.ToolWatch(host)
    heard: list[Any] = []
    watch.listen.bus_for(APP).subscribe(heard.append)
    host.caps.append(Capability(name="demo.late", version="1.0.0"))  # before any pass of the watch
    assert asyncio.run(watch.check()) == 1 and [type(e).__name__ for e in heard] == ["ToolsListChanged"]


def test_the_server_advertises_list_changed_and_hints_the_tool_list_for_the_watch_interval() -> None:
    server = mcp_server.build_server(FakeHost(), mcp_server.ToolWatch(FakeHost(), every_s=2.0))
    caps = server.get_capabilities(protocol_version="2026-07-28")
    assert caps.tools is not None and caps.tools.list_changed is True
    hint = server.cache_hints["tools/list"]
    assert (hint.ttl_ms, hint.scope) == (2000, "private")


NAME = '{"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}'


def asking(schema: str = NAME) -> Ended:
    return Ended("m1", "t1", "INPUT_REQUIRED", reason="m1 asks: Who?", question="Who?", answer_schema=schema)


def test_a_question_is_an_input_required_result_and_the_retry_answers_the_same_message() -> None:
    """Multi Round-Trip (2026-07-28): INPUT_REQUIRED is an InputRequiredResult with one form elicitation; the retry
    carrying the accepted content and the requestState answers the message, whose next ending is the result."""
    host = FakeHost(pending=FakePending(outcome=asking()))
    first = asyncio.run(mcp_server.call(host, APP, params()))
    assert isinstance(first, types.InputRequiredResult) and first.request_state is not None
    assert rounds.asked(first.request_state, host.sealer, APP.app_id) == ("m1", False)
    [(key, asked)] = (first.input_requests or {}).items()
    assert isinstance(asked, types.ElicitRequest) and isinstance(asked.params, types.ElicitRequestFormParams)
    assert asked.params.message == "Who?" and asked.params.requested_schema["required"] == ["name"]
    host.pending = FakePending(message_id="m1", outcome=Ended("m1", "t1", "COMPLETED", {"greeting": "Hello, Ada!"}))
    retry = params()
    retry.input_responses = {key: types.ElicitResult(action="accept", content={"name": "Ada"})}
    retry.request_state = first.request_state
    done = asyncio.run(mcp_server.call(host, APP, retry))
    assert isinstance(done, types.CallToolResult) and done.structured_content == {"greeting": "Hello, Ada!"}
    assert host.answered == [("m1", {"name": "Ada"})] and len(host.sent) == 1, "the same message, not a new one"


def test_a_question_whose_schema_is_no_object_is_wrapped_and_unwrapped() -> None:
    host = FakeHost(pending=FakePending(outcome=asking('{"type": "string"}')))
    first = asyncio.run(mcp_server.call(host, APP, params()))
    assert isinstance(first, types.InputRequiredResult) and first.request_state is not None
    assert rounds.asked(first.request_state, host.sealer, APP.app_id) == ("m1", True)
    retry = params()
    retry.input_responses = {"answer": types.ElicitResult(action="accept", content={"answer": "yes"})}
    retry.request_state = first.request_state
    asyncio.run(mcp_server.call(host, APP, retry))
    assert host.answered == [("m1", "yes")]


@pytest.mark.parametrize(("state", "responses", "why"), [
    ("forged", {"answer": types.ElicitResult(action="accept", content={"name": "x"})}, "requestState is not one"),
    ("reach-input:x:m1", {"answer": types.ElicitResult(action="accept", content={"name": "x"})}, "requestState"),
    ("reach-input:o:" + "m" * 400, {}, "requestState is not one"),
    ("reach-input:o:m1", {}, "is missing"),
    ("reach-input:o:m1", {"answer": types.ElicitResult(action="decline")}, "declined"),
    ("reach-input:w:m1", {"answer": types.ElicitResult(action="accept", content={"other": "x"})}, "under 'answer'"),
])
def test_a_retry_that_cannot_be_read_is_invalid_params_and_answers_nothing(state: str, responses: Any,
                                                                           why: str) -> None:
    host = FakeHost()
    retry = params()
    retry.input_responses, retry.request_state = responses, _sealed(host, state)
    with pytest.raises(mcp_server.MCPError, match=why) as raised:
        asyncio.run(mcp_server.call(host, APP, retry))
    assert raised.value.error.code == types.INVALID_PARAMS and host.answered == [] and host.sent == []


def _sealed(host: FakeHost, state: str, app_id: str = APP.app_id) -> str:
    """`state` as the server seals it for an app ("forged" stays as it is: a state this server never sealed)."""
    return state if state == "forged" else host.sealer.seal(app_id, rounds.SEALED_AS, state.encode()).decode()


def test_a_retry_with_another_apps_or_an_unsealed_request_state_answers_nothing() -> None:
    """Another app of the same tenant cannot answer a question with the state the server sent the asking app."""
    host = FakeHost(pending=FakePending(outcome=asking()))
    first = asyncio.run(mcp_server.call(host, APP, params()))
    assert isinstance(first, types.InputRequiredResult) and first.request_state is not None
    other = CallerApp(app_id="a2", name="a2", tenant=APP.tenant, capabilities=(), rate=10, burst=10)
    for app, state in ((other, first.request_state), (APP, "reach-input:o:m1"), (other, "mangled")):
        if state == "mangled":
            state = _sealed(host, "reach-input:o:m1", "a2")[:-2]
        retry = params()
        retry.input_responses = {"answer": types.ElicitResult(action="accept", content={"name": "x"})}
        retry.request_state = state
        with pytest.raises(mcp_server.MCPError, match="requestState is not one this server sent"):
            asyncio.run(mcp_server.call(host, app, retry))
    assert host.answered == []


def test_an_answer_the_door_refuses_is_a_tool_error_saying_why() -> None:
    host = FakeHost(refuse=Refused(400, "invalid_answer", "the answer does not satisfy the schema", "send JSON like"))
    retry = params()
    retry.input_responses = {"answer": types.ElicitResult(action="accept", content={"nom": "x"})}
    retry.request_state = _sealed(host, "reach-input:o:m1")
    result = asyncio.run(mcp_server.call(host, APP, retry))
    assert isinstance(result, types.CallToolResult) and result.is_error and text(result).startswith("invalid_answer")
