"""`/console`: the operator console's HTML pages and the JSON endpoints under `/console/api` (docs/console.md).

Every route needs an operator token (reach.console.operators): `Authorization: Bearer <token>`, or the
session cookie `/console/login` sets (a server-side session id, never the token: reach.console.sessions).
Without one, pages redirect to the login page and the API answers 401; a viewer's mutation answers 403. The
cookie is HttpOnly, SameSite=Strict and Secure over TLS, a mutation whose Origin names another host is refused
(403), logout needs the session's CSRF token, and no page may be framed (`frame-ancestors 'none'`), so another
site cannot make an operator's browser act.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from reach import dlq, policyfields
from reach.a2a.bearer import a2a_token
from reach.console import overview as overview_sql
from reach.console.operators import Operator
from reach.console.sessions import MemorySessions
from reach.console.wiring import Console
from reach.core.audit import LISTED_KINDS
from reach.core.canarybook import DEFAULT_STEPS
from reach.core.durations import parse_ms
from reach.core.factors import NAMES
from reach.core.views.registryview import Where
from reach.errors import InfraUnavailable, ReachError
from reach.gateway import checks
from reach.gateway.deps import StatusSource
from reach.gateway.events import is_terminal
from reach.intent.errors import HandoffConflict
from reach.names import check_capability
from reach.ops import apps as ops_apps
from reach.ops import canary as ops_canary
from reach.ops import policy as ops_policy
from reach.ops.operators import DEFAULT_REDRIVE_RATE, ROLES
from reach.records import TERMINAL, CanaryState, InstanceAction
from reach.timeparse import parse_time

COOKIE = "reach_console"
HERE = Path(__file__).resolve().parents[1] / "console"
TEMPLATES = Jinja2Templates(directory=str(HERE / "templates"))
TEMPLATES.env.filters["utc"] = lambda ms: datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
PAGES = (("overview", "/console", "Overview"), ("agents", "/console/agents", "Agents"),
         ("messages", "/console/messages", "Message & trace"),
         ("dead-letters", "/console/dead-letters", "Dead letters"), ("routing", "/console/routing", "Routing"),
         ("policy", "/console/policy", "Policy"), ("apps", "/console/apps", "Apps"),
         ("intents", "/console/intents", "Intents & handoffs"), ("audit", "/console/audit", "Audit"),
         ("operators", "/console/operators", "Operators"))
DEFAULT_WINDOW_MS = 5 * 60_000
MAX_REDRIVE = 500  # letters per redrive: a bigger selection is narrowed with filters first
ACTIONS = {a.value.lower(): a for a in (InstanceAction.DRAIN, InstanceAction.DISABLE, InstanceAction.ENABLE)}
TERMINAL_NAMES = frozenset(s.value for s in TERMINAL)
INTENT_SINCE = "1h"  # the stage shares' default window: the receipts topic since then is read per request
HANDOFF_ACTIONS = ("take", "answer", "reroute")
AUDIT_SINCE = "24h"  # the audit page's default window (the topic keeps 90 days: `reach audit --since 30d` reads more)
MAX_AUDIT_ROWS = 500  # the newest shown; narrow the filters (or `reach audit sql`) for more
CANARY_STEPS, CANARY_STEP, CANARY_MIN_SUCCESS = ",".join(map(str, DEFAULT_STEPS)), "60s", "0.95"  # `reach canary start`
APP_ACTIONS = ("create", "rotate", "revoke")
CANARY_ACTIONS = {"promote": CanaryState.PROMOTED, "rollback": CanaryState.ROLLED_BACK}


class Denied(Exception):
    """No operator (401) or not an admin (403); pages turn a 401 into the login redirect."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


NO_FRAMING = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}


def _token(request: Request, sessions: MemorySessions) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    session = sessions.get(request.cookies.get(COOKIE))
    return session.token if session is not None else None


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def _status(exc: Exception) -> int:
    """503 when the broker or the status views did not answer (retry), 409 when another operator moved the same
    handoff first, else 400 (the request cannot apply)."""
    if isinstance(exc, HandoffConflict):
        return 409
    return 503 if isinstance(exc, InfraUnavailable) else 400


def _error(status: int, message: str) -> JSONResponse:
    hint = "log in at /console/login or send Authorization: Bearer <token> (`reach operators create`)" \
        if status == 401 else "ask for an admin operator (`reach operators create NAME --role admin`)"
    if status == 503:
        hint = "the broker or the stream app did not answer; retry in a few seconds"
    name = {401: "unauthenticated", 403: "forbidden", 409: "conflict", 503: "unavailable"}.get(status, "bad_request")
    return JSONResponse({"error": name, "message": message, "hint": hint if status in (401, 403, 503) else None},
                        status_code=status)


def _filters(q: Mapping[str, str]) -> tuple[dlq.Filters, str | None]:
    since, until = parse_time(q.get("since") or None), parse_time(q.get("until") or None)
    ids = frozenset(i for i in q.get("ids", "").split(",") if i.strip())
    return (dlq.Filters(capability=q.get("capability") or None, reason=q.get("reason") or None,
                        agent=q.get("agent") or None, since_ms=since, until_ms=until, ids=ids),
            q.get("error_code") or None)


MAX_FORM_BYTES = 256 * 1024  # a redrive selection of a few thousand ids; a login form is far smaller
FORM_TIMEOUT_S = 10.0
MAX_WINDOW_MS = 24 * 3_600_000  # the overview reads the receipts of its window into memory
MAX_BUCKETS = 500


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body (the pages' forms), last value per field; JSON bodies are read as such. Read with
    a size cap and a deadline: the login form is read before anyone is authenticated."""
    try:
        async with asyncio.timeout(FORM_TIMEOUT_S):
            raw = await checks.read_body(request.headers.get("content-length"), request.stream(), MAX_FORM_BYTES)
    except TimeoutError:
        raise checks.Refusal(408, "body_timeout", f"the form did not arrive within {FORM_TIMEOUT_S:g}s",
                             "send the whole form at once") from None
    if request.headers.get("content-type", "").startswith("application/json"):
        body = json.loads(raw or b"{}")
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        return {k: ",".join(map(str, v)) if isinstance(v, list) else "" if v is None else str(v)
                for k, v in body.items()}
    return {k: v[-1] for k, v in parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()}


def _done(path: str, done: str) -> RedirectResponse:
    """After an admin action: back to its page, which shows what was done (post/redirect/get)."""
    return RedirectResponse(f"{path}?{urlencode({'done': done})}", status_code=303)


def _policy_form(form: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """A policy form's scope (`*` or blank: every capability, else a capability name: InvalidName) and its changes
    (ConfigError for a bad value, ValueError when it changes nothing)."""
    text = form.get("scope", "").strip()
    scope, changes = ops_policy.scope_of(None if text == "*" else text), ops_policy.from_text(form)
    if not changes:
        raise ValueError("give at least one field to change, e.g. max_attempts 3 or budget_ms 2m")
    return scope, changes


N = TypeVar("N", int, float)


def _number(form: Mapping[str, str], name: str, kind: type[N]) -> N | None:
    """A form's number (blank: not given); ValueError naming the field otherwise."""
    text = form.get(name, "").strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is not a {'whole number' if kind is int else 'number'}") from None


def _canary_form(form: Mapping[str, str]) -> tuple[str, str, list[int], int, float]:
    """A canary start form: agent id, version, steps (`5,20,50,100`), step duration (`60s`), min success (0.95);
    BadCanary / BadDuration / ValueError say which field is wrong."""
    agent_id, version = form.get("agent_id", "").strip(), form.get("version", "").strip()
    steps = ops_canary.parse_steps(form.get("steps", "").strip() or CANARY_STEPS)
    step_ms = parse_ms(form.get("step", "").strip() or CANARY_STEP, bare="s", least=1, what="step",
                       hint="expected e.g. 60s, 500ms or 2m")
    text = form.get("min_success", "").strip() or CANARY_MIN_SUCCESS
    try:
        min_success = float(text)
    except ValueError:
        raise ValueError(f"min_success {text!r} is not a number: expected a share within (0, 1], e.g. 0.95") from None
    return agent_id, version, steps, step_ms, min_success


def _weights(form: Mapping[str, str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in NAMES:
        text = form.get(name, "").strip()
        try:
            out[name] = float(text) if text else None
        except ValueError:
            raise ValueError(f"weight {name}={text!r} is not a number") from None
    return out


def console_routes(console: Console, status: StatusSource) -> APIRouter:
    """The console's routes over its backend, operator directory and the status views."""
    router = APIRouter(include_in_schema=False)
    backend = console.backend
    sessions = console.sessions

    def who(request: Request, *, admin: bool = False) -> Operator:
        operator = console.operators.verify(_token(request, sessions))
        if operator is None:
            raise Denied(401, "this console needs an operator token")
        if request.method != "GET" and not _same_origin(request):
            raise Denied(403, "a console mutation from another origin is refused")
        if admin and not operator.admin:
            raise Denied(403, f"operator {operator.name} is a viewer: redrive, drain, enable, disable, weights, "
                              "policy, apps, canary changes, intent mappings, handoff moves and operators need "
                              "an admin")
        return operator

    def page(*, admin: bool = False) -> Callable[[Callable[..., Awaitable[Response]]],
                                                  Callable[..., Awaitable[Response]]]:
        """An HTML route: the operator, or the login redirect; a refusal or a failed action as the error page."""
        def wrap(fn: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
            async def endpoint(request: Request) -> Response:
                try:
                    operator = who(request, admin=admin)
                except Denied as exc:
                    if exc.status == 401:
                        return RedirectResponse("/console/login", status_code=303)
                    return render(request, "error", None, {"error": exc.message}, status_code=exc.status)
                try:
                    return await fn(request, operator)
                except (ReachError, ValueError) as exc:
                    return render(request, "error", operator, {"error": str(exc)}, status_code=_status(exc))
            endpoint.__name__ = fn.__name__
            return endpoint
        return wrap

    def api(*, admin: bool = False) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Response]]]:
        def wrap(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Response]]:
            async def endpoint(request: Request) -> Response:
                try:
                    operator = who(request, admin=admin)
                    result = await fn(request, operator)
                    return result if isinstance(result, Response) else JSONResponse(result)
                except Denied as exc:
                    return _error(exc.status, exc.message)
                except (ReachError, ValueError) as exc:
                    return _error(_status(exc), str(exc))
            endpoint.__name__ = fn.__name__
            return endpoint
        return wrap

    def render(request: Request, name: str, operator: Operator | None, context: dict[str, Any],
               status_code: int = 200) -> HTMLResponse:
        session = sessions.get(request.cookies.get(COOKIE))
        return TEMPLATES.TemplateResponse(request, f"{name}.html", {
            "pages": PAGES, "current": name if name != "error" else None, "operator": operator, "factors": NAMES,
            "csrf": session.csrf if session is not None else "", **context},
            status_code=status_code, headers=NO_FRAMING)

    # -- shared reads: one function per page, used by its HTML and its JSON -------------------------------

    def window(q: Mapping[str, str]) -> tuple[int, int, int]:
        now = int(time.time() * 1000)
        until = parse_time(q.get("until") or None) or now
        since = parse_time(q.get("since") or None) or until - DEFAULT_WINDOW_MS
        if until <= since:
            raise ValueError("until must be later than since")
        if until - since > MAX_WINDOW_MS:
            raise ValueError(f"a window is at most {MAX_WINDOW_MS // 3_600_000} h; narrow since/until")
        # at most MAX_BUCKETS points whatever bucket_ms asks for: one point per bucket is built in memory
        bucket = max(1000, int(q.get("bucket_ms") or (until - since) // 30), (until - since) // MAX_BUCKETS)
        return since, until, bucket

    async def overview_of(q: Mapping[str, str]) -> dict[str, Any]:
        return await run_in_threadpool(backend.overview, *window(q))

    async def message_of(query: str, operator: Operator) -> dict[str, Any]:
        """A message id, or a trace id: its messages, each with its timeline and receipts (decisions included)."""
        code, row = await status.message(query)
        ids = [query] if code == 200 else []
        trace_id = row.get("trace_id") if code == 200 else None
        if code == 404:
            tcode, index = await status.trace(query)
            if tcode == 200:
                trace_id, ids = query, [str(m) for m in index.get("message_ids", [])]
            elif tcode != 404:
                raise InfraUnavailable(str(index.get("message", "the status views do not answer")))
        elif code != 200:
            raise InfraUnavailable(str(row.get("message", "the status views do not answer")))
        messages: list[dict[str, Any]] = []
        for mid in ids:
            mcode, mrow = (code, row) if mid == query else await status.message(mid)
            if mcode != 200:
                continue
            steps = mrow.get("timeline") or []
            first = steps[0]["at"] if steps else int(time.time() * 1000)
            last = steps[-1]["at"] if steps else first
            receipts = await run_in_threadpool(backend.receipts_of, mid, first - 5_000, last + 5_000)
            if not operator.admin:  # the result and its partial results: admins only
                progress = mrow.get("progress")
                hidden = {**progress, "chunks": [{}] * len(progress.get("chunks") or [])} if progress else None
                mrow = {**mrow, "result": None, "progress": hidden}
            messages.append({"row": mrow, "receipts": receipts})
        running = any(not is_terminal(m["row"]) for m in messages)  # the page refreshes until each has ended
        return {"query": query, "trace_id": trace_id, "messages": messages, "shows_result": operator.admin,
                "running": running}

    async def redrive(form: Mapping[str, str], operator: Operator, *, dry_run: bool) -> dict[str, Any]:
        filters, error_code = _filters(form)
        if not dry_run and not filters.ids:
            raise ValueError("a redrive names the letters its dry run listed (ids); run the dry run first")
        if error_code:  # the dead-letter filter has no error code: narrow to the matching letters' ids
            ids = {str(x["id"]) for x in await run_in_threadpool(backend.letters, filters, error_code)}
            ids = ids & filters.ids if filters.ids else ids
            if not ids:
                return {**dlq.Summary().as_dict(), "dry_run": dry_run}
            filters = dlq.Filters(ids=frozenset(ids))
        if len(filters.ids) > MAX_REDRIVE:
            raise ValueError(f"{len(filters.ids)} letters named; redrive at most {MAX_REDRIVE} at a time")
        asked = float(form.get("rate") or operator.redrive_rate)
        if not asked > 0:
            raise ValueError("rate must be > 0 messages per second")
        rate = min(asked, operator.redrive_rate)
        chosen = filters
        result = await run_in_threadpool(lambda: backend.redrive(chosen, dry_run=dry_run, rate=rate,
                                                                      by=f"console:{operator.name}"))
        return {**result, "rate": rate, "filters": {k: form.get(k, "") for k in
                                                      ("capability", "reason", "agent", "error_code", "since",
                                                       "until")}}

    async def instance_action(form: Mapping[str, str], operator: Operator) -> dict[str, str]:
        action, instance_id = ACTIONS.get(form.get("action", "")), form.get("instance_id", "").strip()
        if action is None or not instance_id:
            raise ValueError("expected an instance_id and an action: drain, disable or enable")
        await run_in_threadpool(backend.instance_action, instance_id, action, f"console:{operator.name}")
        return {"instance_id": instance_id, "action": action.value}

    async def finish_canary(form: Mapping[str, str], operator: Operator) -> dict[str, str]:
        state = CANARY_ACTIONS.get(form.get("action", ""))
        if state is None:
            raise ValueError("expected an agent_id and an action: promote or rollback")
        await run_in_threadpool(backend.finish_canary, form.get("agent_id", ""), state, f"console:{operator.name}")
        return {"agent_id": form.get("agent_id", ""), "state": str(state)}

    async def set_app_quota(form: Mapping[str, str], operator: Operator) -> dict[str, Any]:
        app_id = form.get("app_id", "").strip()
        rate, burst = _number(form, "rate", float), _number(form, "burst", int)
        if not app_id:
            raise ValueError("expected an app_id and a new rate, burst or both")
        return await run_in_threadpool(lambda: backend.set_app_quota(app_id, rate=rate, burst=burst,
                                                                     by=f"console:{operator.name}"))

    async def app_change(form: Mapping[str, str], operator: Operator, action: str) -> dict[str, Any]:
        """create / rotate (their answer carries the secret and the A2A token, shown once) or revoke (a key_id:
        that key only)."""
        by, app_id = f"console:{operator.name}", form.get("app_id", "").strip()
        if action == "create":
            rate = _number(form, "rate", float)
            made = await run_in_threadpool(lambda: backend.create_app(
                name=form.get("name", "").strip(), tenant=form.get("tenant", "").strip() or "default",
                capabilities=ops_apps.capabilities(form.get("capabilities")), by=by,
                rate=ops_apps.DEFAULT_RATE if rate is None else rate, burst=_number(form, "burst", int)))
        elif not app_id:
            raise ValueError(f"expected the app_id to {action}")
        elif action == "rotate":
            made = await run_in_threadpool(lambda: backend.rotate_app(app_id, by=by))
        else:
            key_id = form.get("key_id", "").strip() or None
            return await run_in_threadpool(lambda: backend.revoke_app(app_id, key_id=key_id, by=by))
        return {**made, "a2a_token": a2a_token(made["key_id"], made["secret"].encode())}

    async def create_operator(form: Mapping[str, str], operator: Operator) -> dict[str, str]:
        name, role = form.get("name", "").strip(), form.get("role", "").strip()
        rate = _number(form, "redrive_rate", float)
        return await run_in_threadpool(lambda: backend.create_operator(
            name=name, role=role, redrive_rate=DEFAULT_REDRIVE_RATE if rate is None else rate,
            by=f"console:{operator.name}"))

    async def revoke_operator(form: Mapping[str, str], operator: Operator) -> dict[str, Any]:
        operator_id = form.get("operator_id", "").strip()
        if not operator_id:
            raise ValueError("expected the operator_id to revoke")
        if operator_id == operator.operator_id:
            raise ValueError("you cannot revoke your own token from its session: ask another admin, or "
                             f"`reach operators revoke {operator_id}`")
        return await run_in_threadpool(lambda: backend.revoke_operator(operator_id, by=f"console:{operator.name}"))

    async def routing_of() -> dict[str, Any]:
        """The Routing page's reads: weights, canaries, and the registered agents a canary can start for."""
        agents = sorted({str(r["agent_id"]) for r in await run_in_threadpool(backend.agents)})
        return {"weights": await run_in_threadpool(backend.weights), "canaries": await run_in_threadpool(
            backend.canaries), "agents": agents, "canary_defaults": (CANARY_STEPS, CANARY_STEP, CANARY_MIN_SUCCESS)}

    async def start_canary(form: Mapping[str, str], operator: Operator) -> dict[str, Any]:
        agent_id, version, steps, step_ms, min_success = _canary_form(form)
        return await run_in_threadpool(lambda: backend.start_canary(
            agent_id, version=version, steps=steps, step_ms=step_ms, min_success=min_success,
            by=f"console:{operator.name}"))

    async def set_weights(form: Mapping[str, str], operator: Operator) -> dict[str, float]:
        return await run_in_threadpool(backend.set_weights, form.get("scope", "*"), _weights(form),
                                       f"console:{operator.name}")

    async def intents_of(q: Mapping[str, str]) -> dict[str, Any]:
        since = q.get("since") or INTENT_SINCE
        start = parse_time(since)
        if start is None or int(time.time() * 1000) - start > MAX_WINDOW_MS:  # the stats fold holds what it reads
            raise ValueError(f"since {since!r}: the intent stats read at most the last "
                             f"{MAX_WINDOW_MS // 3_600_000} h (`reach intents stats` reads more)")
        found = await run_in_threadpool(backend.intents, start)
        return {**found, "since": since}

    async def policy_preview(form: Mapping[str, str]) -> dict[str, Any]:
        return await run_in_threadpool(backend.policy_preview, *_policy_form(form))

    async def set_policy(form: Mapping[str, str], operator: Operator) -> dict[str, Any]:
        return await run_in_threadpool(backend.set_policy, *_policy_form(form), f"console:{operator.name}")

    async def audit_of(q: Mapping[str, str]) -> dict[str, Any]:
        """The audit events the filters select, newest first, at most MAX_AUDIT_ROWS of them."""
        since, kind = q.get("since") or AUDIT_SINCE, q.get("kind", "").strip()
        rows = await run_in_threadpool(lambda: backend.audit(
            agent=q.get("agent", "").strip() or None, since=since, until=q.get("until") or None,
            kinds=[kind] if kind else []))
        return {"since": since, "total": len(rows), "events": rows[::-1][:MAX_AUDIT_ROWS]}

    async def change_map(form: Mapping[str, str], operator: Operator, action: str) -> dict[str, Any]:
        phrase, by = form.get("phrase", "").strip(), f"console:{operator.name}"
        if not phrase:
            raise ValueError("expected the phrase to map or unmap")
        if action == "unmap":
            return await run_in_threadpool(lambda: backend.unmap_intent(phrase, by=by))
        capability = check_capability(form.get("capability", "").strip())
        confidence = _number(form, "confidence", float)
        return await run_in_threadpool(lambda: backend.map_intent(
            phrase, capability, confidence=1.0 if confidence is None else confidence, by=by))

    async def move_handoff(form: Mapping[str, str], operator: Operator) -> dict[str, Any]:
        action, message_id = form.get("action", ""), form.get("message_id", "").strip()
        if action not in HANDOFF_ACTIONS or not message_id:
            raise ValueError("expected a message_id and an action: take, answer (with an answer) or reroute "
                             "(with a capability)")
        field = "answer" if action == "answer" else "capability"
        value = form.get(field, "").strip()
        if action != "take" and not value:
            raise ValueError(f"{action} needs a non-empty {field}")
        return await run_in_threadpool(lambda: backend.handoff(
            message_id, by=f"console:{operator.name}", answer=value if action == "answer" else None,
            capability=value if action == "reroute" else None))

    # -- login ---------------------------------------------------------------------------------------------

    @router.get("/console/login")
    async def login_page(request: Request) -> Response:
        return render(request, "login", None, {})

    @router.post("/console/login")
    async def login(request: Request) -> Response:
        try:
            token = (await _form(request)).get("token", "").strip()
        except ValueError as exc:  # JSON that is not an object, or not JSON at all
            return render(request, "login", None, {"error": f"The login body is not a form or a JSON object with "
                                                            f"a token ({str(exc)[:200]})."}, status_code=400)
        operator = console.operators.verify(token)
        if operator is None:
            return render(request, "login", None, {"error": "That token is not a live operator token."},
                          status_code=401)
        session = sessions.open(token)
        response = RedirectResponse("/console", status_code=303, headers=NO_FRAMING)
        response.set_cookie(COOKIE, session.session_id, max_age=int(sessions.ttl_s), httponly=True,
                            samesite="strict", path="/console", secure=request.url.scheme == "https")
        return response

    @router.post("/console/logout")
    async def logout(request: Request) -> Response:
        """Ends the session on the server; the form carries the session's CSRF token (a page renders it)."""
        if not _same_origin(request):
            return render(request, "error", None, {"error": "a logout from another origin is refused"},
                          status_code=403)
        try:
            csrf = (await _form(request)).get("csrf")
        except ValueError:
            csrf = None
        if not sessions.close(request.cookies.get(COOKIE), csrf):
            return render(request, "error", None, {"error": "that logout did not carry this session's CSRF "
                                                            "token: log out with the button of a console page"},
                          status_code=403)
        response = RedirectResponse("/console/login", status_code=303, headers=NO_FRAMING)
        response.delete_cookie(COOKIE, path="/console")
        return response

    @router.get("/console/static/console.css")
    async def css() -> Response:
        return Response((HERE / "static" / "console.css").read_bytes(), media_type="text/css")

    # -- pages -----------------------------------------------------------------------------------------

    @router.get("/console")
    @page()
    async def overview_page(request: Request, operator: Operator) -> Response:
        q = dict(request.query_params)
        data = await overview_of(q)
        charts = {c: overview_sql.sparkline(points, since_ms=data["since_ms"], until_ms=data["until_ms"],
                                            bucket_ms=data["bucket_ms"]) for c, points in data["series"].items()}
        live = not q.get("until")
        return render(request, "overview", operator, {"data": data, "charts": charts, "live": live, "q": q})

    @router.get("/console/agents")
    @page()
    async def agents_page(request: Request, operator: Operator) -> Response:
        where = Where.of(request.query_params)  # a page and a filter, never the whole fleet (decision 0068)
        return render(request, "agents", operator, {"rows": await run_in_threadpool(backend.agents, where),
                                                    "where": where, "done": request.query_params.get("done")})

    @router.post("/console/agents/action")
    @page(admin=True)
    async def agent_action(request: Request, operator: Operator) -> Response:
        done = await instance_action(await _form(request), operator)
        return _done("/console/agents", f"{done['action']} {done['instance_id']}")

    @router.get("/console/messages")
    @page()
    async def messages_page(request: Request, operator: Operator) -> Response:
        query = request.query_params.get("q", "").strip()
        found = await message_of(query, operator) if query else None
        return render(request, "messages", operator, {"q": query, "found": found})

    @router.get("/console/dead-letters")
    @page()
    async def letters_page(request: Request, operator: Operator) -> Response:
        q = dict(request.query_params)
        filters, code = _filters(q)
        return render(request, "dead-letters", operator, {
            "q": q, "letters": await run_in_threadpool(backend.letters, filters, code), "dry": None})

    @router.post("/console/dead-letters/dry-run")
    @page()
    async def letters_dry_run(request: Request, operator: Operator) -> Response:
        form = await _form(request)
        return render(request, "dead-letters", operator, {
            "q": form, "letters": None, "dry": await redrive(form, operator, dry_run=True)})

    @router.post("/console/dead-letters/redrive")
    @page(admin=True)
    async def letters_redrive(request: Request, operator: Operator) -> Response:
        form = await _form(request)
        at = int(time.time() * 1000)
        return render(request, "dead-letters", operator, {
            "q": form, "letters": None, "dry": None, "done": await redrive(form, operator, dry_run=False), "at": at})

    @router.get("/console/dead-letters/outcome")
    @page()
    async def letters_outcome(request: Request, operator: Operator) -> Response:
        """The redriven messages' statuses now; the page refreshes itself until every one is terminal."""
        ids = [i for i in request.query_params.get("ids", "").split(",") if i.strip()][:MAX_REDRIVE]
        since = int(request.query_params.get("at") or 0)  # the redrive's time: an older terminal step is the letter's
        rows = []
        for mid in ids:
            code, row = await status.message(mid)
            done = code == 200 and row.get("status") in TERMINAL_NAMES and int(row.get("terminal_at") or 0) >= since
            rows.append({"message_id": mid, "status": row.get("status") if code == 200 else "unknown",
                         "generation": row.get("generation"), "attempt": row.get("attempt"), "done": done})
        settled = all(r["done"] for r in rows)
        return render(request, "outcome", operator, {"rows": rows, "settled": settled})

    @router.get("/console/routing")
    @page()
    async def routing_page(request: Request, operator: Operator) -> Response:
        return render(request, "routing", operator, {
            **await routing_of(), "preview": None, "done": request.query_params.get("done")})

    @router.post("/console/routing/preview")
    @page()
    async def routing_preview(request: Request, operator: Operator) -> Response:
        form = await _form(request)
        result = await run_in_threadpool(backend.preview, form.get("scope", "*"), _weights(form))
        return render(request, "routing", operator, {**await routing_of(), "preview": result, "done": None})

    @router.post("/console/routing/apply")
    @page(admin=True)
    async def routing_apply(request: Request, operator: Operator) -> Response:
        form = await _form(request)
        await set_weights(form, operator)
        return _done("/console/routing", f"weights of {form.get('scope') or '*'} applied")

    @router.post("/console/routing/canary")
    @page(admin=True)
    async def routing_canary(request: Request, operator: Operator) -> Response:
        done = await finish_canary(await _form(request), operator)
        return _done("/console/routing", f"canary {done['state']}")

    @router.get("/console/policy")
    @page()
    async def policy_page(request: Request, operator: Operator) -> Response:
        return render(request, "policy", operator, {
            "reports": await run_in_threadpool(backend.policies), "fields": policyfields.FIELDS, "form": {},
            "preview": None, "done": request.query_params.get("done")})

    @router.post("/console/policy/preview")
    @page()
    async def policy_preview_page(request: Request, operator: Operator) -> Response:
        form = await _form(request)
        seen = await policy_preview(form)
        return render(request, "policy", operator, {
            "reports": await run_in_threadpool(backend.policies), "fields": policyfields.FIELDS, "form": form,
            "preview": seen, "done": None})

    @router.post("/console/policy/apply")
    @page(admin=True)
    async def policy_apply(request: Request, operator: Operator) -> Response:
        done = await set_policy(await _form(request), operator)
        return _done("/console/policy", f"policy of {done['scope']} applied")

    @router.post("/console/routing/canary/start")
    @page(admin=True)
    async def routing_canary_start(request: Request, operator: Operator) -> Response:
        started = await start_canary(await _form(request), operator)
        return _done("/console/routing", f"canary of {started['version']} started for {started['agent_id']} at "
                                         f"{started['share']:.0%}")

    @router.get("/console/apps")
    @page()
    async def apps_page(request: Request, operator: Operator) -> Response:
        return render(request, "apps", operator, {"apps": await run_in_threadpool(backend.apps), "made": None,
                                                  "done": request.query_params.get("done")})

    @router.post("/console/apps/quota")
    @page(admin=True)
    async def apps_quota(request: Request, operator: Operator) -> Response:
        done = await set_app_quota(await _form(request), operator)
        return _done("/console/apps", f"quota of {done['name']}: {done['rate']:g}/s, burst {done['burst']}")

    @router.post("/console/apps/{action}")
    @page(admin=True)
    async def apps_action(request: Request, operator: Operator) -> Response:
        """create and rotate render the new secret once, in this response only (no-store); revoke redirects."""
        action = request.path_params["action"]
        if action not in APP_ACTIONS:
            raise ValueError(f"expected one of {', '.join(APP_ACTIONS)}")
        done = await app_change(await _form(request), operator, action)
        if action == "revoke":
            return _done("/console/apps", f"{done['name']}: key revoked" if done["revoked_at"] is None
                         else f"app {done['name']} revoked")
        response = render(request, "apps", operator, {"apps": await run_in_threadpool(backend.apps), "made": done,
                                                      "done": None})
        response.headers["Cache-Control"] = "no-store"
        return response

    @router.get("/console/operators")
    @page(admin=True)
    async def operators_page(request: Request, operator: Operator) -> Response:
        return render(request, "operators", operator, {"operators": await run_in_threadpool(backend.operators),
                                                       "made": None, "done": request.query_params.get("done"),
                                                       "roles": ROLES, "default_rate": DEFAULT_REDRIVE_RATE})

    @router.post("/console/operators/create")
    @page(admin=True)
    async def operators_create(request: Request, operator: Operator) -> Response:
        """Renders the token once, in this response only (never in a redirect's URL), and asks no cache to keep
        it."""
        made = await create_operator(await _form(request), operator)
        response = render(request, "operators", operator, {"operators": await run_in_threadpool(backend.operators),
                                                           "made": made, "done": None, "roles": ROLES,
                                                           "default_rate": DEFAULT_REDRIVE_RATE})
        response.headers["Cache-Control"] = "no-store"
        return response

    @router.post("/console/operators/revoke")
    @page(admin=True)
    async def operators_revoke(request: Request, operator: Operator) -> Response:
        done = await revoke_operator(await _form(request), operator)
        return _done("/console/operators", f"operator {done['name']} revoked")

    @router.get("/console/intents")
    @page()
    async def intents_page(request: Request, operator: Operator) -> Response:
        q = dict(request.query_params)
        return render(request, "intents", operator, {"data": await intents_of(q), "done": q.get("done")})

    @router.post("/console/intents/map")
    @page(admin=True)
    async def intents_map(request: Request, operator: Operator) -> Response:
        done = await change_map(await _form(request), operator, "map")
        return _done("/console/intents", f"{done['phrase']}: {done['before'] or '(unmapped)'} -> {done['after']}")

    @router.post("/console/intents/unmap")
    @page(admin=True)
    async def intents_unmap(request: Request, operator: Operator) -> Response:
        done = await change_map(await _form(request), operator, "unmap")
        return _done("/console/intents", f"{done['phrase']}: {done['before']} -> (unmapped)")

    @router.post("/console/intents/handoff")
    @page(admin=True)
    async def handoff_action(request: Request, operator: Operator) -> Response:
        moved = await move_handoff(await _form(request), operator)
        return _done("/console/intents", f"{moved['message_id']} {moved['state']}")

    @router.get("/console/audit")
    @page()
    async def audit_page(request: Request, operator: Operator) -> Response:
        q = dict(request.query_params)
        return render(request, "audit", operator, {"q": q, "data": await audit_of(q), "kinds": LISTED_KINDS,
                                                   "limit": MAX_AUDIT_ROWS})

    # -- JSON ------------------------------------------------------------------------------------------

    @router.get("/console/api/whoami")
    @api()
    async def whoami(_request: Request, operator: Operator) -> Any:
        return {"operator_id": operator.operator_id, "name": operator.name, "role": operator.role.value}

    @router.get("/console/api/overview")
    @api()
    async def overview_api(request: Request, _operator: Operator) -> Any:
        return await overview_of(dict(request.query_params))

    @router.get("/console/api/agents")
    @api()
    async def agents_api(request: Request, _operator: Operator) -> Any:
        return await run_in_threadpool(backend.agents, Where.of(request.query_params))

    @router.post("/console/api/agents/action")
    @api(admin=True)
    async def agents_action_api(request: Request, operator: Operator) -> Any:
        return await instance_action(await _form(request), operator)

    @router.get("/console/api/messages")
    @api()
    async def messages_api(request: Request, operator: Operator) -> Any:
        return await message_of(request.query_params.get("q", "").strip(), operator)

    @router.get("/console/api/dead-letters")
    @api()
    async def letters_api(request: Request, _operator: Operator) -> Any:
        filters, code = _filters(dict(request.query_params))
        return await run_in_threadpool(backend.letters, filters, code)

    @router.post("/console/api/dead-letters/dry-run")
    @api()
    async def dry_run_api(request: Request, operator: Operator) -> Any:
        return await redrive(await _form(request), operator, dry_run=True)

    @router.post("/console/api/dead-letters/redrive")
    @api(admin=True)
    async def redrive_api(request: Request, operator: Operator) -> Any:
        return await redrive(await _form(request), operator, dry_run=False)

    @router.get("/console/api/weights")
    @api()
    async def weights_api(_request: Request, _operator: Operator) -> Any:
        return await run_in_threadpool(backend.weights)

    @router.post("/console/api/weights/preview")
    @api()
    async def preview_api(request: Request, _operator: Operator) -> Any:
        form = await _form(request)
        return await run_in_threadpool(backend.preview, form.get("scope", "*"), _weights(form))

    @router.post("/console/api/weights")
    @api(admin=True)
    async def weights_set_api(request: Request, operator: Operator) -> Any:
        return await set_weights(await _form(request), operator)

    @router.get("/console/api/canaries")
    @api()
    async def canaries_api(_request: Request, _operator: Operator) -> Any:
        return await run_in_threadpool(backend.canaries)

    @router.post("/console/api/canaries")
    @api(admin=True)
    async def canary_api(request: Request, operator: Operator) -> Any:
        return await finish_canary(await _form(request), operator)

    @router.post("/console/api/canaries/start")
    @api(admin=True)
    async def canary_start_api(request: Request, operator: Operator) -> Any:
        return await start_canary(await _form(request), operator)

    @router.get("/console/api/apps")
    @api()
    async def apps_api(_request: Request, _operator: Operator) -> Any:
        return await run_in_threadpool(backend.apps)

    @router.post("/console/api/apps/quota")
    @api(admin=True)
    async def apps_quota_api(request: Request, operator: Operator) -> Any:
        return await set_app_quota(await _form(request), operator)

    @router.post("/console/api/apps/{action}")
    @api(admin=True)
    async def apps_action_api(request: Request, operator: Operator) -> Response:
        action = request.path_params["action"]
        if action not in APP_ACTIONS:
            raise ValueError(f"expected one of quota, {', '.join(APP_ACTIONS)}")
        return JSONResponse(await app_change(await _form(request), operator, action),
                            headers={"Cache-Control": "no-store"})

    @router.get("/console/api/operators")
    @api(admin=True)
    async def operators_api(_request: Request, _operator: Operator) -> Any:
        return await run_in_threadpool(backend.operators)

    @router.post("/console/api/operators")
    @api(admin=True)
    async def operators_create_api(request: Request, operator: Operator) -> Response:
        made = await create_operator(await _form(request), operator)
        return JSONResponse(made, headers={"Cache-Control": "no-store"})

    @router.post("/console/api/operators/revoke")
    @api(admin=True)
    async def operators_revoke_api(request: Request, operator: Operator) -> Any:
        return await revoke_operator(await _form(request), operator)

    @router.get("/console/api/intents")
    @api()
    async def intents_api(request: Request, _operator: Operator) -> Any:
        return await intents_of(dict(request.query_params))

    @router.get("/console/api/policy")
    @api()
    async def policy_api(_request: Request, _operator: Operator) -> Any:
        return await run_in_threadpool(backend.policies)

    @router.post("/console/api/policy/preview")
    @api()
    async def policy_preview_api(request: Request, _operator: Operator) -> Any:
        return await policy_preview(await _form(request))

    @router.post("/console/api/policy")
    @api(admin=True)
    async def policy_set_api(request: Request, operator: Operator) -> Any:
        return await set_policy(await _form(request), operator)

    @router.get("/console/api/audit")
    @api()
    async def audit_api(request: Request, _operator: Operator) -> Any:
        return await audit_of(dict(request.query_params))

    @router.post("/console/api/intents/map")
    @api(admin=True)
    async def intents_map_api(request: Request, operator: Operator) -> Any:
        return await change_map(await _form(request), operator, "map")

    @router.post("/console/api/intents/unmap")
    @api(admin=True)
    async def intents_unmap_api(request: Request, operator: Operator) -> Any:
        return await change_map(await _form(request), operator, "unmap")

    @router.post("/console/api/handoffs")
    @api(admin=True)
    async def handoff_api(request: Request, operator: Operator) -> Any:
        return await move_handoff(await _form(request), operator)

    return router
