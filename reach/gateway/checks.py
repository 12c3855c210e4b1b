"""The contract checks at the door, in order: auth, size, JSON, permission, quota, capability, schema.

Each check raises a Refusal (an HTTP status and an ErrorBody); nothing here touches Kafka, so a refused
request never reaches the bus. Only `read_body` does I/O (the request stream)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from reach.callers import AuthFailure, CallerApp
from reach.core.contracts import pick
from reach.core.routing import validation_error
from reach.core.versions import BadVersion, parse_range, satisfies
from reach.envelopes import MAX_PAYLOAD_BYTES
from reach.errors import ReachError
from reach.gateway.bodies import ErrorBody
from reach.gateway.ports import QuotaDecision
from reach.names import check_capability
from reach.records import Capability

M = TypeVar("M", bound=BaseModel)
MAX_MESSAGE_CHARS = 1000  # a schema error quotes the offending value, which may be most of a 256 KiB payload


class Refusal(ReachError):
    """A request the door refuses: HTTP status, a stable error code, what happened, what to do."""

    def __init__(self, status: int, error: str, message: str, hint: str | None = None,
                 headers: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + "…"
        super().__init__(message)
        self.status = status
        self.body = ErrorBody(error=error, message=message, hint=hint)
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})  # fields of this error beyond ErrorBody's (budget_exceeded: reset_at)

    def content(self) -> dict[str, object]:
        """The JSON body: ErrorBody's fields and this error's own."""
        return {**self.body.model_dump(), **self.extra}


UNAUTHORIZED = "unauthorized"  # the 401 `error` when the authenticator names no finer code


def unauthorized(reason: str, code: str = UNAUTHORIZED) -> Refusal:
    return Refusal(401, code, reason,
                   "sign each request: Reach-Key: <key_id>, Reach-Signature: t=<unix>,n=<nonce>,v2=<hex "
                   "HMAC-SHA256 of t.n.METHOD.path?query.body> (docs/http.md)")


def refuse_auth(failure: AuthFailure) -> Refusal:
    """401 with the failure's reason; `error` is its coarse code (missing, malformed, stale, denied, replay)
    when the authenticator gives one."""
    return unauthorized(failure.reason, str(getattr(failure, "code", None) or UNAUTHORIZED))


def too_large(what: str, size: int | None, limit: int) -> Refusal:
    shown = f"{size:,} bytes" if size is not None else f"more than {limit:,} bytes"
    return Refusal(413, "payload_too_large", f"the {what} is {shown}; the limit is {limit:,} bytes",
                   "send a reference (a URL or object key) instead of the data")


async def read_body(content_length: str | None, chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The raw body, refusing (413) from Content-Length before reading, or as soon as the stream passes limit."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise Refusal(400, "bad_request", f"Content-Length {content_length[:40]!r} is not a number") from None
        if declared > limit:
            raise too_large("request body", declared, limit)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise too_large("request body", None, limit)
    return bytes(body)


def parse_json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except RecursionError:
        raise Refusal(400, "bad_json", "the body nests deeper than the JSON reader allows") from None
    except ValueError as exc:
        raise Refusal(400, "bad_json", f"the body is not JSON ({exc})",
                      "send Content-Type: application/json with a JSON object") from None


def parse_model(document: object, model: type[M]) -> M:
    """The body as `model`, or a 400 naming the first wrong field."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(body)"
        raise Refusal(400, "bad_request", f"the body does not match {model.__name__} at {where}: {first['msg']}",
                      "see /openapi.json for the request schema") from None


def encode_payload(payload: object, limit: int = MAX_PAYLOAD_BYTES) -> bytes:
    """The payload's JSON bytes as the Envelope will carry them; 413 over the limit."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    if len(body) > limit:
        raise too_large("payload", len(body), limit)
    return body


def check_names(capability: str, version: str) -> None:
    try:
        check_capability(capability)
        parse_range(version)
    except (BadVersion, ReachError) as exc:
        raise Refusal(400, "bad_request", str(exc)) from None


def check_may_call(app: CallerApp, capability: str) -> None:
    if not app.may_call(capability):
        raise Refusal(403, "forbidden", f"app {app.app_id} may not call {capability}",
                      "ask an operator to add the capability to the app (`reach apps`)")


def check_quota(decision: QuotaDecision, app: CallerApp, capability: str) -> None:
    if decision.allowed:
        return
    retry = max(1, int(-(-decision.retry_after_s // 1)))  # whole seconds, rounded up, at least 1
    whose = f"app {app.app_id}" if decision.scope != "capability" else f"capability {capability}"
    kind = "read" if decision.scope == "read" else "request"
    raise Refusal(429, "quota_exceeded", f"the {kind} quota of {whose} is used up",
                  f"retry after {retry} s (Retry-After)", headers={"Retry-After": str(retry)})


def check_contract(versions: Sequence[Capability], *, capability: str, version_range: str, payload: bytes,
                   waits: bool) -> str | None:
    """404 when no live version matches the range (unless the request waits for one, `waits`); 422 when the
    payload violates the input schema of every live version that matches. Else the contract version the request
    is stamped with (its `schema_version`, reach.core.contracts): None for one that waits for a version."""
    matching = [c for c in versions if satisfies(c.version, version_range)]
    if not matching:
        if waits:
            return None
        live = ", ".join(sorted({c.version for c in versions}))
        detail = f" (live versions: {live})" if live else ""
        raise Refusal(404, "unknown_capability",
                      f"no live instance serves {capability} {version_range}{detail}",
                      "check the name and version range (`reach agents`), or set expire_at to park the "
                      "request until an instance serves it")
    problems = [validation_error(c.input_schema, payload, "application/json") for c in matching]
    if all(p is not None for p in problems):
        first = next(p for p in problems if p is not None)
        raise Refusal(422, "invalid_payload", f"{capability} {matching[0].version}: {first}",
                      "fix the payload to match the capability's input_schema (`reach agents --json`)")
    return pick([c for c, problem in zip(matching, problems, strict=True) if problem is None])
