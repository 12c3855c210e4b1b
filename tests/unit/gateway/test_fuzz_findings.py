"""What the gateway's schemathesis run (tests/integration/test_gateway_fuzz.py) found, each held here without a
broker, and the rule that keeps the fuzzing complete: every `/v1` route the gateway serves is in its document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

from reach.channels.settings import ClosureSettings
from reach.gateway.bodies import MAX_EPOCH_MS
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.kafka import codec
from tests.unit.gateway.fakes import Fakes
from tests.unit.gateway.test_service import post

GOOD = {"capability": "demo.echo", "payload": {"text": "hi"}}


def _client(fakes: Fakes) -> TestClient:
    return TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings(secret="s")))


def _routes(routes: list[Any]) -> Iterator[Any]:
    """Every route, also inside included routers (FastAPI >= 0.165 keeps an included router as one entry)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        yield from _routes(inner.routes) if inner is not None else (route,)


def test_every_v1_route_is_in_the_document() -> None:
    """schemathesis fuzzes what /openapi.json declares: a /v1 route left out of it would never be fuzzed."""
    app = build_gateway(Fakes().deps(), HttpSettings(), closure=ClosureSettings(secret="s"))
    served = {(method, route.path) for route in _routes(app.routes) if isinstance(route, BaseRoute)
              and getattr(route, "path", "").startswith("/v1/") for method in getattr(route, "methods", ()) or ()
              if method != "HEAD"}
    doc = TestClient(app).get("/openapi.json").json()
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    assert ("POST", "/v1/callbacks/{token}") in served and ("POST", "/v1/envelopes") in served, served
    assert served <= documented, served - documented


def test_a_reply_declares_its_json_body() -> None:
    """POST /v1/callbacks/{token} reads its raw body: without a declared body the fuzzer sent none, and never got
    past the 400 that an empty reply earns."""
    doc = TestClient(build_gateway(Fakes().deps(), HttpSettings(), closure=ClosureSettings(secret="s"))).get(
        "/openapi.json").json()
    body = doc["paths"]["/v1/callbacks/{token}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["type"] == "object" and body["properties"]["capability"] == {"type": "string"}


def test_an_expire_at_past_any_date_is_a_400_not_a_500() -> None:
    """schemathesis: `expire_at` 2.8e35 passed the door (ge=0 only) and failed the envelope's Avro encoding (500)."""
    fakes = Fakes()
    client = _client(fakes)
    far = post(client, "/v1/envelopes", {**GOOD, "expire_at": 285614818931366924978439893653913600})
    assert far.status_code == 400 and "expire_at" in far.text and fakes.publisher.sent == []
    latest = post(client, "/v1/envelopes", {**GOOD, "expire_at": MAX_EPOCH_MS})
    assert latest.status_code == 202
    [sent] = fakes.publisher.sent
    assert codec.decode(codec.encode(sent), type(sent)).expire_at == MAX_EPOCH_MS  # what the door takes encodes


def test_a_read_over_its_quota_is_a_declared_429() -> None:
    """schemathesis (a longer run): the read quota's 429 (finding 4) was not in the read routes' document."""
    from tests.unit.gateway.fakes import FakeQuotas, signed_get
    from tests.unit.gateway.test_openapi import check

    fakes = Fakes(quotas=FakeQuotas(read_rate=0.001, read_burst=1))
    client = _client(fakes)
    doc = client.get("/openapi.json").json()
    signed_get(client, "/v1/messages/m1")
    for path, template in (("/v1/messages/m1", "/v1/messages/{message_id}"), ("/v1/traces/t1", "/v1/traces/{trace_id}"),
                           ("/v1/messages/m1/events", "/v1/messages/{message_id}/events")):
        refused = signed_get(client, path)
        assert refused.status_code == 429, path
        check(doc, template, "get", refused)
        assert "Retry-After" in doc["paths"][template]["get"]["responses"]["429"]["headers"]
