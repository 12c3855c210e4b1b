"""Admission for every untrusted surface of the gateway, in one place: who may come in (identity), what the app may
reach (its capability list), what it takes of its quotas (writes, reads), how much it may hold open at once (event
streams, MCP sessions), and whether its spend limits still let it in.

`SURFACES` is the table of every route a caller can reach and the checks it passes (docs/operations.md "Security"
shows it; tests/unit/gateway/test_gate_surfaces.py walks the gateway's routes against it and fails on a route
that is in neither `SURFACES` nor `OPEN`). `Gate` is the one implementation of the per-app checks; the door of /v1
(reach.gateway.intake.Admission), A2A (reach.gateway.routes_a2a), MCP (reach.gateway.routes_mcp), push configs, the
status reads and the event streams call it, so a rule changed here changes for every surface at once
(docs/decisions/0059-one-admission-for-every-surface.md).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from reach.callers import CallerApp
from reach.channels.catalog import CAPABILITY_PREFIX
from reach.core.spend import Exceeded
from reach.errors import InfraUnavailable
from reach.gateway import checks
from reach.gateway.budgets import refusal

if TYPE_CHECKING:
    from reach.gateway.deps import Dependencies
    from reach.gateway.metrics import GatewayMetrics

WEBHOOK = CAPABILITY_PREFIX + "webhook"  # a `callback` and an A2A push config are webhooks: this capability's right
ROWS_PER_READ = 25  # a read that reads many status rows (a trace) takes one read token per this many rows


class Check(StrEnum):
    """What admission checks on a surface."""

    IDENTITY = "identity"
    ALLOW_LIST = "allow-list"
    WRITE_QUOTA = "write quota"
    READ_QUOTA = "read quota"
    STREAMS = "streams per app"
    WAITS = "waits per app"
    SESSIONS = "sessions per app"
    SPEND = "spend"


@dataclass(frozen=True, slots=True)
class Surface:
    """One untrusted surface: its routes (method, path template), how a caller proves who it is, and the checks."""

    name: str
    routes: tuple[tuple[str, str], ...]
    identity: str
    checks: tuple[Check, ...]
    note: str = ""
    prefix: str | None = None  # every route under this path, whatever its method (the console's many pages)


_SIGNED = "Reach-Signature v2 of an app key"
GRPC = "gRPC"  # the "method" of a gRPC surface's routes: its paths are gRPC methods, served beside the HTTP routes
_BEARER = "Bearer A2A token of an app key"
ID, A, W, R, S, T, M, P = (Check.IDENTITY, Check.ALLOW_LIST, Check.WRITE_QUOTA, Check.READ_QUOTA, Check.STREAMS,
                           Check.WAITS, Check.SESSIONS, Check.SPEND)

SURFACES: tuple[Surface, ...] = (
    Surface("/v1 sends", (("POST", "/v1/envelopes"), ("POST", "/v1/envelopes:batch"), ("POST", "/v1/invoke")),
            _SIGNED, (ID, A, P, W, T), "a `callback` needs the right to channel.webhook; `callback_progress` is a push "
            "config (as A2A's: a write token of channel.webhook too); a batch takes a token per item; an invoke that "
            "repeats an idempotency_key waits on the status table in one of the app's REACH_GATEWAY_WAITS_PER_APP"),
    Surface("/v1 answers", (("POST", "/v1/messages/{message_id}:input"),), _SIGNED, (ID, A, P, W, R),
            "judged like a send of the message's capability, and one read"),
    Surface("/v1 cancels", (("POST", "/v1/messages/{message_id}:cancel"),), _SIGNED, (ID, R),
            "the app's own tenant's messages only"),
    Surface("/v1 reads", (("GET", "/v1/messages/{message_id}"), ("GET", "/v1/traces/{trace_id}")), _SIGNED, (ID, R),
            f"a trace takes one read per {ROWS_PER_READ} rows it reads, and reads at most REACH_GATEWAY_TRACE_ROWS"),
    Surface("/v1 event streams", (("GET", "/v1/messages/{message_id}/events"),), _SIGNED, (ID, R, S),
            "one slot of the app's REACH_GATEWAY_SSE_PER_APP, shared with A2A streams"),
    Surface("A2A JSON-RPC", (("POST", "/a2a/"), ("POST", "/a2a/cap/{capability}/")), _BEARER,
            (ID, A, P, W, R, S, T), "sends as /v1 sends; GetTask, ListTasks, push config reads as /v1 reads; "
            "SendStreamingMessage and SubscribeToTask hold a stream slot; a blocking SendMessage and CancelTask hold "
            "a wait slot; a push config needs the right to channel.webhook, a write token of channel.webhook and the "
            "spend limits"),
    Surface("MCP", (("GET", "/mcp"), ("POST", "/mcp"), ("DELETE", "/mcp")), _BEARER, (ID, A, P, W, R, M),
            "initialize and tools/list take a read token, tools/call is a /v1 invoke; "
            "REACH_GATEWAY_MCP_SESSIONS_PER_APP sessions per app; Origin checked"),
    Surface("gRPC", tuple((GRPC, f"/reach.v1.Gateway/{m}") for m in ("Send", "Invoke", "GetStatus", "WatchSteps")),
            "Reach-Signature v2 of an app key, as metadata (reach-key, reach-signature) over the request's bytes",
            (ID, A, P, W, R, S, T), "Send and Invoke as /v1 sends, GetStatus as a /v1 read, WatchSteps as a /v1 "
            "event stream (a read and a stream slot); messages over REACH_GATEWAY_MAX_BODY_BYTES refused by gRPC; "
            "`reach gateway --grpc-port` only"),
    Surface("channel replies", (("POST", "/v1/callbacks/{token}"),), "single-use reply token (REACH_CALLBACK_SECRET)",
            (ID, A, W), "the token's capability, the default or REACH_CALLBACK_REPLY_CAPABILITIES only; the tenant's "
            "reply bucket"),
    Surface("provider reports", (("POST", "/v1/reports/{channel}"),), "Reach-Signature v2 of the provider's secret",
            (ID,), "names a message the channel sent; writes one receipt step"),
    Surface("console", (), "operator session cookie (operator token login)", (ID,),
            "operators, not apps: no app quota applies; the login page and its stylesheet are open", prefix="/console"),
    Surface("metrics", (("GET", "/metrics"),), "REACH_GATEWAY_METRICS_TOKEN bearer, else loopback peers only", (ID,),
            "lists app ids, tenants, traffic and spend"),
)

OPEN: frozenset[tuple[str, str]] = frozenset({
    ("GET", "/healthz"), ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"), ("GET", "/.well-known/agent-card.json"),
    ("GET", "/a2a/cap/{capability}/.well-known/agent-card.json"),
    ("GET", "/.well-known/oauth-protected-resource"), ("GET", "/.well-known/oauth-protected-resource/mcp"),
})
"""Routes anyone may read: health, the API's own description, the A2A cards and MCP's protected resource metadata
(public by their protocols; they name capabilities served to every tenant, never an app or a tenant)."""


def surface_of(method: str, path: str) -> Surface | None:
    """The surface a route belongs to, or None (an open route, or one nobody declared: a defect)."""
    return next((s for s in SURFACES if (method, path) in s.routes
                 or s.prefix is not None and (path == s.prefix or path.startswith(s.prefix + "/"))), None)


class Slots:
    """What one app holds open at once in this process (event streams, sessions), bounded per app."""

    def __init__(self, per_app: int, *, what: str, error: str, hint: str) -> None:
        self.per_app = per_app
        self._what, self._error, self._hint = what, error, hint
        self._open: dict[str, int] = {}

    def held(self, app: CallerApp) -> int:
        return self._open.get(app.app_id, 0)

    def take(self, app: CallerApp) -> None:
        """One slot more for the app, or 429 when it holds `per_app` already."""
        if self.held(app) >= self.per_app:
            raise checks.Refusal(429, self._error, f"app {app.app_id} already holds {self.per_app} {self._what} open "
                                 "on this gateway", self._hint, headers={"Retry-After": "1"})
        self._open[app.app_id] = self.held(app) + 1

    def give_back(self, app: CallerApp) -> None:
        left = self.held(app) - 1
        if left > 0:
            self._open[app.app_id] = left
        else:
            self._open.pop(app.app_id, None)

    @contextlib.contextmanager
    def hold(self, app: CallerApp) -> Iterator[None]:
        """One slot while the block runs (429 when the app holds `per_app` already), given back however it ends."""
        self.take(app)
        try:
            yield
        finally:
            self.give_back(app)

    async def holding(self, app: CallerApp, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`stream` with a slot already taken, giving it back however the stream ends (done, timeout, client gone)."""
        try:
            async for chunk in stream:
                yield chunk
        finally:
            self.give_back(app)


@contextlib.contextmanager
def unavailable_as_503() -> Iterator[None]:
    """Redis (nonces, quotas, idempotency, spend) not answering refuses the request, never admits it unmetered."""
    try:
        yield
    except InfraUnavailable as exc:
        raise checks.Refusal(503, "unavailable", str(exc), "retry in a few seconds",
                             headers={"Retry-After": "1"}) from None


class Gate:
    """The per-app checks every surface passes: `may_call` (the capability list), `spend` (the spend limits), `write`
    (a token of the app's and the capability's quota), `read` (tokens of the app's read bucket), `push` (a webhook the
    app asks for: A2A push configs), and the per-app slots of event streams, waiting calls and MCP sessions."""

    def __init__(self, deps: Dependencies, metrics: GatewayMetrics, *, streams_per_app: int,
                 sessions_per_app: int, waits_per_app: int = 32) -> None:
        self._deps = deps
        self._metrics = metrics
        self.streams = Slots(streams_per_app, what="event streams", error="too_many_streams",
                             hint="close a stream (SSE or A2A), or poll the status instead")
        # a call that waits by re-reading the status row (a blocking A2A send or cancel, an invoke repeating an
        # idempotency key) reads it every REACH_GATEWAY_SSE_POLL for as long as it waits: bounded like a stream
        self.waits = Slots(waits_per_app, what="waiting calls", error="too_many_waits",
                           hint="send without waiting (A2A: configuration.returnImmediately; /v1: POST /v1/envelopes) "
                                "and read the status, or wait for a waiting call of the app to end")
        self.sessions_per_app = sessions_per_app

    @staticmethod
    def may_call(app: CallerApp, capability: str) -> None:
        """403 unless the app's capability list allows the capability."""
        checks.check_may_call(app, capability)

    async def spend(self, app: CallerApp, now_ms: int) -> None:
        """429 budget_exceeded once one of the app's (or its tenant's) spend limits is reached."""
        budgets = self._deps.budgets
        if budgets is None or not budgets.limited(app):
            return
        with unavailable_as_503():
            verdict = await budgets.judge(app, now_ms)
        exceeded = isinstance(verdict, Exceeded)
        self._metrics.budget(app.app_id, app.tenant, verdict.uses, warn=budgets.warn, refused=exceeded)
        if isinstance(verdict, Exceeded):
            raise refusal(app, verdict, now_ms)

    async def write(self, app: CallerApp, capability: str, *, known: bool = True) -> None:
        """One token of the app's and the capability's quota (429 + Retry-After; 503 when Redis does not answer).
        `known`: whether a live instance serves the capability (the metrics' capability label)."""
        with unavailable_as_503():
            decision = await self._deps.quotas.take(app, capability)
        if not decision.allowed:
            self._metrics.quota_hit(app.app_id, capability, decision.scope, known)
        checks.check_quota(decision, app, capability)

    async def read(self, app: CallerApp, rows: int = 1) -> None:
        """Tokens of the app's read bucket: one per `ROWS_PER_READ` status rows the read costs (at least one)."""
        cost = max(1, math.ceil(rows / ROWS_PER_READ))
        with unavailable_as_503():
            decision = await self._deps.quotas.take_read(app, cost)
        checks.check_quota(decision, app, "")

    async def push(self, app: CallerApp) -> None:
        """A push config is a webhook the app has sent for every change of its task: it needs the right to
        channel.webhook when the app has a capability list (as a /v1 `callback` does), the spend limits, and a token
        of the app's and channel.webhook's quota per config kept."""
        if app.capabilities:
            self.may_call(app, WEBHOOK)
        await self.spend(app, self._deps.clock_ms())
        await self.write(app, WEBHOOK)

    def session(self, app: CallerApp, held: int) -> None:
        """429 when the app already holds `sessions_per_app` MCP sessions (`held`: how many it holds now)."""
        if held >= self.sessions_per_app:
            raise checks.Refusal(429, "too_many_sessions", f"app {app.app_id} already holds {self.sessions_per_app} "
                                 "MCP sessions open on this gateway", "end a session (DELETE /mcp) or reuse one; idle "
                                 "sessions close by themselves", headers={"Retry-After": "1"})


def table() -> str:
    """SURFACES as the Markdown table of docs/operations.md "Security" (a test keeps the two equal)."""
    head = ["surface", "routes", "identity", *(c.value for c in Check if c is not Check.IDENTITY), "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in SURFACES:
        routes = ", ".join(f"`{p}`" if m == GRPC else f"`{m} {p}`" for m, p in s.routes) or f"`{s.prefix}/*`"
        marks = ["yes" if c in s.checks else "-" for c in Check if c is not Check.IDENTITY]
        lines.append("| " + " | ".join([s.name, routes, s.identity, *marks, s.note]) + " |")
    return "\n".join(lines)
