"""schemathesis against the real gateway's own /openapi.json, every generated request signed (the auth hook):
no 5xx, and no response that violates the document (status, content type, headers, body schema).

A short bounded run by default (REACH_FUZZ_EXAMPLES examples per operation, default 15); a longer one with e.g.
`REACH_FUZZ_EXAMPLES=500 REACH_CI=1 .venv/bin/pytest -q -s tests/integration/test_gateway_fuzz.py`.
Unsigned fuzzing would only test the 401 path, so the hook signs the exact bytes sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from reach.bench import noop_agent
from reach.bench.gateway_stack import GatewayStack, SignedApp, child_env
from reach.settings import KafkaSettings, RedisSettings
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("REACH_FUZZ_EXAMPLES", "15"))
CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_headers_conformance, checks.response_schema_conformance]
# waits that would turn a fuzz run into a sleep: a generated invoke or event stream ends within a second
QUICK_WAITS = {"REACH_GATEWAY_INVOKE_TIMEOUT_MS": "500", "REACH_GATEWAY_INVOKE_TIMEOUT_MAX_MS": "1000",
               "REACH_GATEWAY_SSE_FIND": "0.2", "REACH_GATEWAY_SSE_MAX": "2"}


@pytest.fixture
def gateway(namespace: str, stream_app: StreamApp, tmp_path: Path) -> Iterator[GatewayStack]:
    """A real gateway beside a real router (its status routes read the router's views) and the no-op agent."""
    env = child_env(namespace, KafkaSettings(), home=tmp_path / "home", redis_url=RedisSettings().url(),
                    topics_file=Path(os.environ["REACH_TOPICS_FILE"]))
    env.update(REACH_WEB_PORT=str(stream_app.port), **QUICK_WAITS)
    with GatewayStack(env=env) as stack:
        yield stack


def signed_send(http: httpx.Client, app: SignedApp, case: Any, base_url: str) -> httpx.Response:
    """The auth hook: serialise the generated body once, sign those bytes, send exactly them."""
    kwargs = case.as_transport_kwargs(base_url=base_url)
    headers = {k: str(v) for k, v in (kwargs.get("headers") or {}).items()}
    if "json" in kwargs:
        raw = json.dumps(kwargs["json"]).encode()
        headers.setdefault("Content-Type", "application/json")
    else:
        data = kwargs.get("data", kwargs.get("content", b""))
        raw = data.encode() if isinstance(data, str) else bytes(data or b"")
    signed = app.headers(raw)
    headers.update({"Reach-Key": signed["Reach-Key"], "Reach-Signature": signed["Reach-Signature"]})
    assert not kwargs.get("cookies"), "the document declares no cookie parameters"
    return http.request(kwargs["method"], kwargs["url"], params=kwargs.get("params"), headers=headers, content=raw)


def fuzz(op: Any, send: Callable[[Any], httpx.Response], codes: dict[int, int]) -> None:
    """EXAMPLES generated cases of one operation, each sent signed and checked against the document."""

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(op.as_strategy())
        if isinstance(case.body, dict) and "capability" in case.body and data.draw(st.booleans()):
            # half the envelopes name the live capability, so fuzzing reaches past the 404 into publishing
            case.body["capability"] = noop_agent.CAPABILITY
        response = send(case)
        codes[response.status_code] = codes.get(response.status_code, 0) + 1
        case.validate_response(response, checks=CHECKS)

    run()


def test_signed_fuzzing_finds_no_5xx_and_no_response_outside_the_document(gateway: GatewayStack) -> None:
    schema = schemathesis.openapi.from_url(gateway.url + "/openapi.json")
    app = gateway.signed_app()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert any(op.path == "/v1/envelopes" and op.method.upper() == "POST" for op in operations), \
        [f"{op.method} {op.path}" for op in operations]
    seen: dict[str, dict[int, int]] = {}
    with httpx.Client(timeout=30) as http:
        for op in operations:
            fuzz(op, lambda case: signed_send(http, app, case, gateway.url),
                 seen.setdefault(f"{op.method.upper()} {op.path}", {}))
    print(f"\nschemathesis, {EXAMPLES} examples per operation, signed; status codes seen: {seen}")
    assert any(200 <= code < 300 for codes in seen.values() for code in codes), \
        "signed fuzzing got past the door at least once (else it only tested the 401 path)"
    assert not any(code >= 500 for codes in seen.values() for code in codes), seen
