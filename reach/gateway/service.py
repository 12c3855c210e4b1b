"""The gateway's ASGI app: `build_gateway(deps, settings)` wires routes, error bodies, metrics and OpenAPI."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reach.channels.settings import ClosureSettings, ReportSettings
from reach.errors import InfraUnavailable
from reach.gateway import openapi
from reach.gateway.checks import Refusal
from reach.gateway.deps import Dependencies
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.intake import Admission
from reach.gateway.metrics import GatewayMetrics
from reach.gateway.routes_a2a import a2a_routes, cancel_routes
from reach.gateway.routes_callbacks import callback_routes
from reach.gateway.routes_console import console_routes
from reach.gateway.routes_envelopes import ENVELOPES, envelope_routes
from reach.gateway.routes_input import input_routes
from reach.gateway.routes_mcp import mcp_endpoint, mcp_routes
from reach.gateway.routes_reports import report_routes
from reach.gateway.routes_status import status_routes

UNMATCHED = "(unmatched)"  # route label of requests no route matched: never the raw path (unbounded labels)


class CountRequests:
    """ASGI middleware: one count per response by route template, status and authenticated app."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen: list[int] = []

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            route = getattr(scope.get("route"), "path", UNMATCHED)
            app_id = scope.get("state", {}).get("app_id")
            self.metrics.request(route, seen[0] if seen else 500, app_id)


class LimitHead:
    """ASGI middleware: 431 for a request head over `limit` bytes. The HTTP protocol's own cap
    (reach.gateway.httpproto) only bounds a head still arriving (a slow, endless one); a large head that
    arrives whole in one read passes it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size += sum(len(k) + len(v) + 4 for k, v in scope["headers"])
            if size > self.limit:
                response = _error(431, "headers_too_large", f"the request head is {size:,} bytes; the limit is "
                                  f"{self.limit:,}", "send fewer or smaller headers")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error(status: int, error: str, message: str, hint: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, "hint": hint}, status_code=status, headers=headers)


def refused(exc: Refusal) -> JSONResponse:
    return JSONResponse(exc.content(), status_code=exc.status, headers=exc.headers)


def unavailable(exc: InfraUnavailable) -> JSONResponse:
    return _error(503, "unavailable", str(exc), "retry in a few seconds", headers={"Retry-After": "1"})


class HotPath:
    """ASGI middleware: `POST /v1/envelopes` straight to its endpoint, past Starlette's router, FastAPI's request
    machinery and exception middleware (about a third of the request's CPU; see
    docs/decisions/0014-gateway-throughput.md). The endpoint reads its own body and raises the same Refusals,
    answered the same way; the route stays registered, so /openapi.json documents it and every other method
    still gets the router's 405."""

    def __init__(self, app: ASGIApp, route: APIRoute, admission: Admission) -> None:
        self.app = app
        self.route = route
        self.endpoint = route.endpoint
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.route.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route  # CountRequests labels by it
        request = Request(scope, receive, send)
        try:
            response = await self.endpoint(request)
        except Refusal as exc:
            await self.admission.refused_after_auth(getattr(request.state, "verified", None), exc)
            response = refused(exc)
        except InfraUnavailable as exc:
            response = unavailable(exc)
        await response(scope, receive, send)


Beside = Callable[[Admission], AbstractAsyncContextManager[Any]]
"""Another ingress served beside the HTTP one, on its event loop and through its admission (reach.grpc.ingress)."""


def build_gateway(deps: Dependencies, settings: HttpSettings, metrics: GatewayMetrics | None = None, *,
                  closure: ClosureSettings, reports: ReportSettings | None = None,
                  beside: Sequence[Beside] = ()) -> FastAPI:
    """The HTTP service over its dependencies; `deps.closers` run when the app shuts down. Without `reports`
    (the providers' report secrets) the report routes answer 404 `reports_off`. `beside`: ingresses that run while
    the app does (started after the MCP sessions' manager, stopped before it), passing the same admission."""
    metrics = metrics or GatewayMetrics()
    admission = Admission(deps, settings, metrics)
    mcp = mcp_endpoint(admission, deps.directory)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with mcp.run(), AsyncExitStack() as others:  # MCP sessions end before the dependencies they call close
            for ingress in beside:
                await others.enter_async_context(ingress(admission))
            yield
        for close in deps.closers:
            done = close()
            if inspect.isawaitable(done):
                await done

    app = FastAPI(title="Agent-Reach gateway", version="1", lifespan=lifespan,
                  description="Signed HTTP ingress to the Agent-Reach bus (docs/http.md).")
    envelopes = envelope_routes(admission)
    app.include_router(envelopes)
    app.include_router(status_routes(admission))
    app.include_router(callback_routes(admission, closure))
    app.include_router(report_routes(admission, reports))
    if deps.console is not None:
        app.include_router(console_routes(deps.console, deps.status))
    app.include_router(cancel_routes(admission))
    app.include_router(input_routes(admission))
    app.router.routes.extend(a2a_routes(admission, deps.directory))
    app.router.routes.extend(mcp_routes(mcp))

    @app.exception_handler(Refusal)
    async def on_refusal(request: Request, exc: Refusal) -> JSONResponse:
        await admission.refused_after_auth(getattr(request.state, "verified", None), exc)
        return refused(exc)

    @app.exception_handler(InfraUnavailable)
    async def on_unavailable(_request: Request, exc: InfraUnavailable) -> JSONResponse:
        return unavailable(exc)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        name = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, name, str(exc.detail), "see /openapi.json for the routes",
                      headers=dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(400, "bad_request", f"{where}: {first.get('msg', 'invalid request')}")

    openapi.install(app)
    hot = next(r for r in envelopes.routes
               if isinstance(r, APIRoute) and r.path == ENVELOPES and "POST" in (r.methods or ()))
    app.add_middleware(HotPath, route=hot, admission=admission)
    app.add_middleware(LimitHead, limit=settings.max_header_bytes)
    app.add_middleware(CountRequests, metrics=metrics)
    app.state.metrics = metrics
    return app
