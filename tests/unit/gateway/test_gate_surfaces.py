"""Every route of the gateway is either open by its protocol (reach.gateway.gate.OPEN) or one of the untrusted
surfaces admission declares (SURFACES), and every declared one refuses a caller without credentials before doing
anything; the table in docs/operations.md "Security" is SURFACES."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from reach.channels.settings import ClosureSettings
from reach.gateway import gate
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import Fakes

OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
HTTP = {r for s in gate.SURFACES for r in s.routes if r[0] != gate.GRPC}  # gRPC's: tests/unit/grpc/test_ingress.py
FILLED = {"capability": "demo.echo"}  # a path parameter's value when a route is called; anything else: "x"


def routes(found: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """(method, path template) of every route, into included routers too; HEAD is GET's."""
    for route in found:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from routes(included.routes)
            continue
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                yield method, route.path


def undeclared(app: FastAPI) -> list[tuple[str, str]]:
    return [r for r in routes(app.routes) if r not in gate.OPEN and gate.surface_of(*r) is None]


def gateway(fakes: Fakes) -> FastAPI:
    return build_gateway(dataclasses.replace(fakes.deps(), directory=fakes.directory), HttpSettings(),
                         closure=ClosureSettings())


def test_every_route_is_open_or_a_declared_surface() -> None:
    app = gateway(Fakes())
    assert undeclared(app) == []
    assert HTTP <= set(routes(app.routes)), "a surface names a route the gateway no longer has"


def test_the_walk_fails_on_a_route_that_skips_admission() -> None:
    app = gateway(Fakes())
    app.router.routes.append(Route("/v1/backdoor", lambda _request: PlainTextResponse("in"), methods=["POST"]))
    assert undeclared(app) == [("POST", "/v1/backdoor")]


@pytest.mark.parametrize(("method", "path"), sorted(HTTP))
def test_a_declared_surface_refuses_a_caller_without_credentials(method: str, path: str) -> None:
    fakes = Fakes()
    app = gateway(fakes)
    target = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: FILLED.get(m.group(1), "x"), path)

    async def call() -> httpx.Response:
        remote = httpx.ASGITransport(app=app, client=("203.0.113.7", 4000))
        async with httpx.AsyncClient(transport=remote, base_url="http://gw") as http:
            return await http.request(method, target, json={"capability": "demo.echo", "payload": {}},
                                      headers={"Accept": "application/json, text/event-stream"})

    answer = asyncio.run(call())
    assert answer.status_code in (401, 404), (method, path, answer.status_code, answer.text[:200])
    assert fakes.publisher.sent == [] and fakes.quotas.taken == 0 and fakes.quotas.read_tokens == 0


def test_the_security_table_in_operations_md_is_the_declared_surfaces() -> None:
    assert gate.table() in OPERATIONS.read_text()
