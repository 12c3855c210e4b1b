"""schemathesis against the real gateway's own /openapi.json, every generated request signed (the auth hook):
no 5xx (but the agent's outcome that /v1/invoke relays as 502/504, see RELAYED), and no response that violates
the document (status, content type, headers, body schema). Every `/v1` operation the document declares is fuzzed
(tests/unit/gateway/test_openapi.py holds that every `/v1` route the gateway serves is in the document).

In CI beside the parallel part (decision 0072; it was in the serial part, issue 28 item 5), bounded in time:
REACH_FUZZ_EXAMPLES examples per operation (default 150) within REACH_FUZZ_SECONDS for all operations (default 120,
twice the serial part's 60, so that beside the parallel part's load the examples, not the clock, still end the run;
each operation gets its share, and what one leaves over goes to the next). One gateway, router and agent serve the
module's three tests; a longer run with `make fuzz-api` (REACH_FUZZ_EXAMPLES=2000, REACH_FUZZ_SECONDS=0: no time
bound, and no per-test timeout). Unsigned fuzzing would only test the 401 path, so the hook signs the exact bytes sent;
it also makes half the cases reach past the first refusal: a live capability, the ids earlier 202s returned, a
cancel body that names its path's message, reply tokens minted with the gateway's REACH_CALLBACK_SECRET.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from reach.channels.tokens import ReplyClaims, mint
from reach.envelopes import now_ms
from reach.settings import KafkaSettings, RedisSettings
from reach.tooling.bench import noop_agent
from reach.tooling.bench.gateway_stack import GatewayStack, SignedApp, child_env
from tests.integration.conftest import Infra, fresh_namespace
from tests.integration.stream_app import StreamApp

# a time-bounded run that judges answers, not latency: in the pytest process beside the parallel part (scripts/test.sh)
pytestmark = [pytest.mark.integration, pytest.mark.beside]

EXAMPLES = int(os.environ.get("REACH_FUZZ_EXAMPLES", "150"))
SECONDS = float(os.environ.get("REACH_FUZZ_SECONDS", "120"))  # 0: no time bound
CHUNK = 25  # examples per hypothesis run: the time bound is checked between runs
MAIN_SHARE = 0.75  # of SECONDS for the operations; the event stream (streams last up to 2 s each) has the rest
DOCUMENT = [checks.status_code_conformance, checks.content_type_conformance, checks.response_headers_conformance,
            checks.response_schema_conformance]
CHECKS = [checks.not_a_server_error, *DOCUMENT]
# POST /v1/invoke relays the agent's outcome: 502 when the agent FAILED, 504 when no terminal receipt came within
# timeout_ms or the budget ran out (EXPIRED), both declared in /openapi.json with an InvokeAnswer body. Those two,
# with that body, are the answer the caller asked for, not a server fault; every other 5xx fails the test.
RELAYED = {(502, "FAILED"), (504, "PENDING"), (504, "EXPIRED")}
EVENTS = "/v1/messages/{message_id}/events"
# The event stream is fuzzed in test_the_event_stream_matches_the_document, on its own: it also follows one real
# message to its terminal event, and a stream for a known id stays open up to REACH_GATEWAY_SSE_MAX.
# waits that would turn a fuzz run into a sleep: a generated invoke or event stream ends within a second
QUICK_WAITS = {"REACH_GATEWAY_INVOKE_TIMEOUT_MS": "500", "REACH_GATEWAY_INVOKE_TIMEOUT_MAX_MS": "1000",
               "REACH_GATEWAY_SSE_FIND": "0.2", "REACH_GATEWAY_SSE_MAX": "2"}
# the door's bound on one Redis call (0.5 s by default) is a latency the shared machines miss under load: a nonce
# claim that took longer answered 503 `unavailable` (right for the door, but a fuzz finding it is not)
PATIENT_REDIS = {"REACH_GATEWAY_REDIS_TIMEOUT": "5"}
CALLBACK_SECRET = "fuzz-reply-secret"  # so /v1/callbacks/{token} is on, and the hook can mint real tokens


@pytest.fixture(scope="module")
def gateway(infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayStack]:
    """A real gateway beside a real router (its status routes read the router's views) and the no-op agent: one
    for the module's three tests (each started its own: 10 s of set-up and tear-down apiece)."""
    with pytest.MonkeyPatch.context() as patch, contextlib.ExitStack() as stack:
        namespace = stack.enter_context(contextlib.contextmanager(fresh_namespace)(infra, patch))
        logs = tmp_path_factory.mktemp("gateway-fuzz")
        router = StreamApp(logs)
        patch.setenv("REACH_WEB_PORT", str(router.port))
        router.start()
        stack.callback(router.stop)
        env = child_env(namespace, KafkaSettings(), home=logs / "home", redis_url=RedisSettings().url(),
                        topics_file=Path(os.environ["REACH_TOPICS_FILE"]))
        env.update(REACH_WEB_PORT=str(router.port), REACH_CALLBACK_SECRET=CALLBACK_SECRET, **QUICK_WAITS,
                   **PATIENT_REDIS)
        yield stack.enter_context(GatewayStack(env=env))


def signed_send(http: httpx.Client, app: SignedApp, case: Any, base_url: str) -> httpx.Response:
    """The auth hook: serialise the generated body once, sign those bytes (a GET: the empty body), send them."""
    kwargs = case.as_transport_kwargs(base_url=base_url)
    headers = {k: str(v) for k, v in (kwargs.get("headers") or {}).items()}
    if "json" in kwargs:
        raw = json.dumps(kwargs["json"]).encode()
        headers.setdefault("Content-Type", "application/json")
    else:
        data = kwargs.get("data", kwargs.get("content", b""))
        raw = data.encode() if isinstance(data, str) else bytes(data or b"")
    assert not kwargs.get("cookies"), "the document declares no cookie parameters"
    request = http.build_request(kwargs["method"], kwargs["url"], params=kwargs.get("params"), headers=headers,
                                 content=raw)
    # v2 covers the method and the target as sent: httpx's raw_path is the encoded path and query
    signed = app.headers(raw, method=request.method, target=request.url.raw_path.decode("ascii"))
    request.headers.update({"Reach-Key": signed["Reach-Key"], "Reach-Signature": signed["Reach-Signature"]})
    return http.send(request)


def relayed(op: Any, response: httpx.Response) -> bool:
    """An invoke answer that reports the agent's outcome with a 5xx (see RELAYED)."""
    if (op.method.upper(), op.path) != ("POST", "/v1/invoke"):
        return False
    try:
        status = response.json().get("status")
    except ValueError:
        return False
    return (response.status_code, status) in RELAYED


def reply_token(message_id: str, trace_id: str) -> str:
    """A reply token for an accepted message, as the channel agent would mint it (the default tenant's, an hour)."""
    claims = ReplyClaims(message_id=message_id, trace_id=trace_id, tenant="default",
                         expires_at=now_ms() + 3_600_000, capability=noop_agent.CAPABILITY)
    return mint(CALLBACK_SECRET.encode(), claims)


def fuzz(op: Any, send: Callable[[Any], httpx.Response], codes: dict[int, int], known: dict[str, list[str]],
         until: float | None = None, only: list[Any] | None = None) -> None:
    """EXAMPLES generated cases of one operation, each sent signed and checked against the document; ids that
    earlier 202s returned (`known`) replace half the generated path ids, so the status routes answer 200 too.
    The examples run in rounds of CHUNK, each a hypothesis run of its own, until EXAMPLES ran or `until`
    (time.monotonic) passed: the run keeps to its time share, and a failing round shrinks undisturbed. A round
    draws from the ids known when it started (`pool`): hypothesis replays a choice sequence while shrinking and
    needs it to draw alike, so ids a round's 202s return only serve the rounds after it."""
    pool: dict[str, list[str]] = {}

    @settings(max_examples=min(EXAMPLES, CHUNK), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(op.as_strategy())
        if isinstance(case.body, dict) and "capability" in case.body and data.draw(st.booleans()):
            # half the envelopes name the live capability, so fuzzing reaches past the 404 into publishing
            case.body["capability"] = noop_agent.CAPABILITY
        params = case.body.get("params") if isinstance(case.body, dict) else None
        if isinstance(params, dict) and "name" in params and data.draw(st.booleans()):
            params["name"] = noop_agent.CAPABILITY  # half the MCP tool calls name the live tool
        for name in case.path_parameters or {}:
            if pool.get(name) and data.draw(st.booleans()):
                case.path_parameters[name] = data.draw(st.sampled_from(pool[name]))
        if op.path.endswith(":cancel") and isinstance(case.body, dict) and data.draw(st.booleans()):
            case.body["message_id"] = case.path_parameters["message_id"]  # the body names the message it cancels
        response = send(case)
        if response.status_code in (200, 202) and op.method.upper() == "POST":
            try:
                answer = response.json()
            except ValueError:
                answer = None
            if isinstance(answer, dict) and answer.get("message_id") and answer.get("trace_id"):
                known.setdefault("message_id", []).append(answer["message_id"])
                known.setdefault("trace_id", []).append(answer["trace_id"])
                known.setdefault("token", []).append(reply_token(answer["message_id"], answer["trace_id"]))
        codes[response.status_code] = codes.get(response.status_code, 0) + 1
        if only is not None:  # a document of the test's own (JSON-RPC): only that nothing is a server error
            case.validate_response(response, checks=only)
            return
        case.validate_response(response, checks=DOCUMENT if relayed(op, response) else CHECKS)

    ran = 0
    while ran < EXAMPLES and (until is None or time.monotonic() < until):
        pool.clear()
        pool.update({name: list(ids[-200:]) for name, ids in known.items()})  # the latest, a bounded choice
        run()
        ran += CHUNK


def test_signed_fuzzing_finds_no_5xx_and_no_response_outside_the_document(gateway: GatewayStack) -> None:
    schema = schemathesis.openapi.from_url(gateway.url + "/openapi.json")
    app = gateway.signed_app()
    every = [result.ok() for result in schema.get_all_operations()]
    operations = [op for op in every if op.path != EVENTS]
    documented = {f"{op.method.upper()} {op.path}" for op in every if op.path.startswith("/v1/")}
    assert {"POST /v1/envelopes", "POST /v1/envelopes:batch", "POST /v1/invoke", "GET /v1/messages/{message_id}",
            "GET /v1/traces/{trace_id}", "GET /v1/messages/{message_id}/events",
            "POST /v1/messages/{message_id}:cancel", "POST /v1/callbacks/{token}"} <= documented, documented
    seen: dict[str, dict[int, int]] = {}
    known: dict[str, list[str]] = {}
    started = time.monotonic()
    ordered = sorted(operations, key=lambda o: o.method.upper() != "POST" or "{" in o.path)  # POSTs that make ids
    with httpx.Client(timeout=30) as http:
        for n, op in enumerate(ordered, 1):
            # its share of the time (the event stream has the rest), and what the operations before it left over
            until = started + SECONDS * MAIN_SHARE * n / len(ordered) if SECONDS > 0 else None
            fuzz(op, lambda case: signed_send(http, app, case, gateway.url),
                 seen.setdefault(f"{op.method.upper()} {op.path}", {}), known, until)
    print(f"\nschemathesis, up to {EXAMPLES} examples per operation in {SECONDS:g} s (took "
          f"{time.monotonic() - started:.0f} s), signed; status codes seen: {seen}")
    assert documented - {f"GET {EVENTS}"} <= seen.keys(), "every /v1 operation was fuzzed (the event stream below)"
    assert any(200 <= code < 300 for codes in seen.values() for code in codes), \
        "signed fuzzing got past the door at least once (else it only tested the 401 path)"
    past = [label for label in ("POST /v1/envelopes", "POST /v1/messages/{message_id}:cancel",
                                "POST /v1/callbacks/{token}") if not {202, 409} & seen[label].keys()]
    assert not past, f"fuzzing never got past the first refusal of {past}: {seen}"
    five = {label: [c for c in codes if c >= 500] for label, codes in seen.items()}
    assert all(not c or label == "POST /v1/invoke" for label, c in five.items()), seen


def test_the_event_stream_matches_the_document(gateway: GatewayStack) -> None:
    schema = schemathesis.openapi.from_url(gateway.url + "/openapi.json")
    app = gateway.signed_app()
    operation = schema[EVENTS]["GET"]
    body = json.dumps({"capability": noop_agent.CAPABILITY, "payload": {"text": "events"}}).encode()
    with httpx.Client(timeout=30) as http:
        accepted = http.post(gateway.url + "/v1/envelopes", content=body, headers=app.headers(body))
        assert accepted.status_code == 202, accepted.text
        known = {"message_id": [accepted.json()["message_id"]]}
        until = time.monotonic() + SECONDS * (1 - MAIN_SHARE) if SECONDS > 0 else None
        fuzz(operation, lambda case: signed_send(http, app, case, gateway.url), {}, known, until)
        case = operation.Case(path_parameters={"message_id": known["message_id"][0]})
        response = signed_send(http, app, case, gateway.url)
        assert response.status_code == 200 and "event: terminal" in response.text, response.text[-500:]
        case.validate_response(response, checks=CHECKS)


# -- A2A and /mcp: JSON-RPC over one POST each, not in /openapi.json; fuzzed from a document of their own -----------

RPC_SECONDS = SECONDS / 2  # their share in CI's short run (0: no bound, as for the rest)
A2A_METHODS = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
               "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
               "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard", "message/send", "no/such"]
MCP_METHODS = ["initialize", "ping", "tools/list", "tools/call", "resources/list", "prompts/list",
               "notifications/initialized", "notifications/cancelled", "logging/setLevel", "no/such"]
ANY_ANSWER = {"default": {"description": "any answer but a 5xx", "content": {"*/*": {"schema": {}}}}}


def rpc_operation(methods: list[str], params: dict[str, Any], headers: list[dict[str, Any]]) -> dict[str, Any]:
    """One POST whose body is a JSON-RPC request: a known method (or not), params shaped like the real ones."""
    body = {"type": "object", "required": ["jsonrpc", "method"], "properties": {
        "jsonrpc": {"enum": ["2.0", "1.0"]}, "id": {"type": ["integer", "string", "null"]},
        "method": {"enum": methods}, "params": params}}
    return {"post": {"parameters": headers, "requestBody": {"required": True,
                                                            "content": {"application/json": {"schema": body}}},
                     "responses": ANY_ANSWER}}


A2A_PARAMS = {"type": "object", "properties": {
    "message": {"type": "object", "properties": {
        "messageId": {"type": "string"}, "role": {"enum": ["ROLE_USER", "ROLE_AGENT", "x"]},
        "taskId": {"type": "string"}, "contextId": {"type": "string"},
        "parts": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
            "text": {"type": "string"}, "data": {}}}}}},
    "id": {"type": "string"}, "taskId": {"type": "string"}, "historyLength": {"type": "integer"},
    "configuration": {"type": "object"},
    "pushNotificationConfig": {"type": "object", "properties": {"url": {"type": "string"},
                                                                "token": {"type": "string"}}}}}
MCP_PARAMS = {"type": "object", "properties": {
    "protocolVersion": {"enum": ["2025-11-25", "2025-06-18", "1999-01-01"]}, "capabilities": {"type": "object"},
    "clientInfo": {"type": "object", "properties": {"name": {"type": "string"}, "version": {"type": "string"}}},
    "name": {"type": "string"}, "arguments": {"type": "object"}, "cursor": {"type": "string"},
    "requestId": {}, "level": {"type": "string"}}}


def rpc_document() -> dict[str, Any]:
    version = [{"name": "A2A-Version", "in": "header", "required": False, "schema": {"enum": ["1.0", "0.3", "9"]}}]
    session = [{"name": "Mcp-Session-Id", "in": "header", "required": False, "schema": {"type": "string"}},
               {"name": "MCP-Protocol-Version", "in": "header", "required": False,
                "schema": {"enum": ["2025-11-25", "2025-06-18", "x"]}}]
    return {"openapi": "3.0.3", "info": {"title": "A2A and MCP JSON-RPC, for fuzzing", "version": "1"},
            "paths": {"/a2a/": rpc_operation(A2A_METHODS, A2A_PARAMS, version),
                      f"/a2a/cap/{noop_agent.CAPABILITY}/": rpc_operation(A2A_METHODS, A2A_PARAMS, version),
                      "/mcp": rpc_operation(MCP_METHODS, MCP_PARAMS, session)}}


def bearer_send(http: httpx.Client, token: str, case: Any, base_url: str, session_id: str | None) -> httpx.Response:
    """A generated JSON-RPC request with the app's A2A / MCP bearer token; half the MCP ones in a real session."""
    kwargs = case.as_transport_kwargs(base_url=base_url)
    headers = {k: str(v) for k, v in (kwargs.get("headers") or {}).items()}
    headers.update({"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})
    if session_id and case.path == "/mcp" and next(ALTERNATE):  # every other one inside the real session
        headers.update({"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"})
    return http.post(kwargs["url"], json=kwargs.get("json"), headers=headers)


ALTERNATE = itertools.cycle([True, False])


def test_a2a_and_mcp_fuzzing_finds_no_5xx(gateway: GatewayStack) -> None:
    """Generated JSON-RPC requests (known and unknown methods, params shaped like the real ones, a live capability
    in half the messages) to the mesh and per-capability A2A endpoints and to /mcp: no 5xx."""
    from reach.a2a.bearer import a2a_token

    app = gateway.signed_app()
    token = a2a_token(app.key_id, app.secret.encode())
    schema = schemathesis.openapi.from_dict(rpc_document())
    seen: dict[str, dict[int, int]] = {}
    with httpx.Client(timeout=30) as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}
        opened = http.post(gateway.url + "/mcp", json=init, headers={
            "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})
        assert opened.status_code == 200, opened.text
        session_id = opened.headers.get("mcp-session-id")
        operations = [result.ok() for result in schema.get_all_operations()]
        started = time.monotonic()
        for n, op in enumerate(operations, 1):
            until = started + RPC_SECONDS * n / len(operations) if RPC_SECONDS > 0 else None
            fuzz(op, lambda case: bearer_send(http, token, case, gateway.url, session_id),
                 seen.setdefault(op.path, {}), {}, until, only=[checks.not_a_server_error])
    print(f"\nJSON-RPC fuzzing, up to {EXAMPLES} examples per endpoint in {RPC_SECONDS:g} s; status codes: {seen}")
    assert set(seen) == {"/a2a/", f"/a2a/cap/{noop_agent.CAPABILITY}/", "/mcp"}
    # past the door, each one: a 200, or /mcp's 202 for a notification the session took (with a fixed seed every
    # round draws the same cases, and seed 97056134287225680376588730952287070007 gave /mcp no 200 in 150)
    assert all({200, 202} & codes.keys() for codes in seen.values()), seen
    assert all(code < 500 for codes in seen.values() for code in codes), seen
