"""The OpenAPI document's declared errors and request bodies (the routes read raw bytes, so they declare them).

The signature is over the raw body, so no route lets FastAPI parse it: each one names its body model
here, and `install` puts those models into the document's components."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from reach.gateway.bodies import (
    BatchRequest,
    CancelRequest,
    EnvelopeRequest,
    ErrorBody,
    InputRequestBody,
    InvokeAnswer,
    InvokeRequest,
)

_REF = "#/components/schemas/{model}"
_WHY = {
    400: "not JSON, or not the request schema", 401: "missing, malformed, stale, replayed or unknown signature",
    403: "the app may not call this capability", 404: "no live instance serves the capability and version range",
    408: "the body did not arrive in time", 409: "the same idempotency_key is still waiting for its ack",
    413: "body or payload over the size limit", 422: "the payload violates every matching version's input schema",
    429: "quota used up, or a spend limit reached (`budget_exceeded`, with `reset_at`); Retry-After says when to "
         "come back", 431: "the request head is too large",
    503: "the broker did not acknowledge in time",
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}


def _error(code: int, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"description": _WHY.get(code, "error")}
    if schema is None:
        entry["model"] = ErrorBody
    else:
        entry["content"] = {"application/json": {"schema": schema}}
    if code in (429, 503):
        entry["headers"] = _RETRY_AFTER
    return entry


ERRORS: dict[int | str, dict[str, Any]] = {code: _error(code) for code in _WHY}
_EITHER = {"anyOf": [{"$ref": _REF.format(model="ErrorBody")}, {"$ref": _REF.format(model="InvokeAnswer")}]}
_WHY.update({502: "the agent failed the request", 504: "no terminal receipt in time, or the budget ran out"})
INVOKE_ERRORS: dict[int | str, dict[str, Any]] = {code: _error(code, _EITHER) for code in _WHY}
READ_ERRORS: dict[int | str, dict[str, Any]] = {401: _error(401),
                                                404: {"model": ErrorBody, "description": "unknown id, or another "
                                                      "tenant's (never told apart)"},
                                                429: {**_error(429), "description": "the app's read quota is used "
                                                      "up (Retry-After says when to come back), or it holds "
                                                      "REACH_GATEWAY_SSE_PER_APP event streams already"},
                                                431: _error(431),
                                                503: {"model": ErrorBody, "description": "status table or apps "
                                                      "directory unavailable"}}
BODIES: tuple[type[BaseModel], ...] = (EnvelopeRequest, InvokeRequest, BatchRequest, CancelRequest,
                                       InputRequestBody)


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": _REF.format(model=model.__name__)}}}},
        "parameters": [{"name": name, "in": "header", "required": True, "schema": {"type": "string"},
                        "description": text} for name, text in (
            ("Reach-Key", "the app's key id"),
            ("Reach-Signature", "t=<unix>,n=<nonce>,v2=<hex HMAC-SHA256(secret, t.n.METHOD.path?query.body)>"))]}


def install(app: FastAPI) -> None:
    """Build the document once, adding the body models (and their $defs) to the components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        documented: tuple[type[BaseModel], ...] = (*BODIES, ErrorBody, InvokeAnswer)
        for model in documented:
            schema = model.model_json_schema(ref_template=_REF)
            schemas.update(schema.pop("$defs", {}))
            schemas[model.__name__] = schema
        batch_items = schemas["BatchRequest"]["properties"]["items"]
        batch_items["items"] = {"$ref": _REF.format(model="EnvelopeRequest")}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
