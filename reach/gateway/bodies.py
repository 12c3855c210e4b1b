"""The gateway's request and response bodies (pydantic), the source of its OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

_STRICT = ConfigDict(extra="forbid")
# 9999-12-31T23:59:59.999Z: a time in epoch ms fits an Avro long and every date type (schemathesis sent 2.8e35,
# which passed `ge=0` and failed the envelope's encoding with a 500)
MAX_EPOCH_MS = 253_402_300_799_999


class Routing(BaseModel):
    """Hints that steer the router's choice (Envelope.routing)."""

    model_config = _STRICT

    region: str | None = Field(default=None, max_length=64)
    session_key: str | None = Field(default=None, max_length=256, description="same key, same instance, in order")
    tags: list[str] = Field(default_factory=list, max_length=32)
    priority: int = Field(default=0, ge=-2**31, le=2**31 - 1)
    canary: bool = False
    strict_tags: bool = Field(default=False, description="only instances carrying every tag serve it (no fallback "
                              "to untagged ones: none ends UNROUTABLE)")


class EnvelopeRequest(BaseModel):
    """One request for a capability; tenant and source come from the calling app, never from here."""

    model_config = _STRICT

    capability: str = Field(..., min_length=1, max_length=200, examples=["demo.echo"])
    version: str = Field(default="*", min_length=1, max_length=100, description="semver range, e.g. ^1.2")
    payload: JsonValue = Field(..., description="any JSON value; at most 256 KiB once encoded")
    routing: Routing = Field(default_factory=Routing)
    budget_ms: int | None = Field(default=None, ge=1, le=7 * 24 * 3600 * 1000, description="created -> deadline")
    expire_at: int | None = Field(default=None, ge=0, le=MAX_EPOCH_MS, description="epoch ms; park the request "
                                  "until then when no instance serves it yet (no 404)")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200,
                                        description="a repeat from the same app returns the original 202")
    intent: str | None = Field(default=None, min_length=1, max_length=2000,
                               description="what is wanted in words (or an intent id), with capability "
                               "intent.resolve: the resolver picks the capability (docs/intent.md)")
    max_tokens: int | None = Field(default=None, ge=0, le=10**15, description="budget: input + output tokens this "
                                   "request and the requests it causes may spend (0043); 0 ends it BUDGET_EXCEEDED")
    max_cost: float | None = Field(default=None, ge=0, le=10**9, allow_inf_nan=False,
                                   description="budget: cost in units of the deployment's currency (at most six "
                                   "decimals) this request and the requests it causes may spend")
    callback: str | None = Field(default=None, max_length=2048, pattern=r"^https?://[^\s]+$",
                                 description="an http(s) URL carried on the envelope (Envelope.callback) for "
                                 "the caller: when the message ends, a channel agent POSTs its terminal outcome "
                                 "there as a signed webhook (public addresses only; see docs/channels.md)")
    callback_progress: bool = Field(default=False, description="also POST the handler's progress and partial "
                                    "results to `callback` as they come (`event: progress` / `event: chunk` "
                                    "bodies, through the same webhook channel); needs `callback`")

class CancelRequest(BaseModel):
    """POST /v1/messages/{id}:cancel: the signed body names the message it cancels (the path must match)."""

    message_id: str = Field(description="the message to cancel; the same id as in the path")


class InputRequestBody(BaseModel):
    """POST /v1/messages/{id}:input: the answer to the question a waiting message asks (INPUT_REQUIRED)."""

    model_config = ConfigDict(extra="forbid")

    message_id: str = Field(description="the message answered; the same id as in the path")
    answer: JsonValue = Field(description="the answer: one JSON document satisfying the question's schema (the status "
                        "row's `input.answer_schema`), at most 32 KiB encoded")


class InvokeRequest(EnvelopeRequest):
    """A request whose terminal receipt the gateway waits for."""

    timeout_ms: int | None = Field(default=None, ge=1, description="how long to wait (capped by the gateway)")


class BatchRequest(BaseModel):
    """Up to 500 envelopes in one call; each one gets its own result."""

    model_config = _STRICT

    items: list[dict[str, Any]] = Field(..., min_length=1, max_length=500,
                                        description="EnvelopeRequest objects")


class Accepted(BaseModel):
    """The broker acknowledged the envelope."""

    message_id: str
    trace_id: str
    status_url: str


class ErrorBody(BaseModel):
    """Every refusal: what happened, and what to do next."""

    error: str = Field(..., examples=["payload_too_large"])
    message: str
    hint: str | None = None


class BatchItem(BaseModel):
    """One item's outcome: `status` is the HTTP status it would have had on its own."""

    index: int
    status: int
    accepted: Accepted | None = None
    error: ErrorBody | None = None


class BatchResult(BaseModel):
    """Per-item outcomes, in request order."""

    accepted: int
    refused: int
    items: list[BatchItem]


class ReceiptError(BaseModel):
    """Why a request ended other than COMPLETED (the receipt's error)."""

    kind: str
    code: str
    message: str


class ChainStep(BaseModel):
    """One ending of a request's fallback chain."""

    message_id: str
    capability: str
    status: str


class InvokeAnswer(BaseModel):
    """The terminal receipt of an invoke's fallback chain (or the wait that ran out)."""

    message_id: str
    trace_id: str
    status: str = Field(..., description="the receipt status; PENDING when the wait ran out")
    result: JsonValue = None
    receipt_error: ReceiptError | None = None
    agent_id: str | None = None
    instance_id: str | None = None
    error: str | None = Field(default=None, description="set unless COMPLETED")
    message: str | None = None
    hint: str | None = None
    chain: list[ChainStep] | None = Field(default=None, description="set when the capability's fallback served the "
                                          "request: each ending in order, the request's own first (e.g. UNROUTABLE), "
                                          "then its child `<id>-fb0`; status and result are the last one's")


class MessageRow(BaseModel):
    """A status table row (`reach status --json` shows the same)."""

    model_config = ConfigDict(extra="allow")

    message_id: str
    status: str
    timeline: list[dict[str, Any]] = Field(default_factory=list)


class TraceIndex(BaseModel):
    """The message ids of one trace, oldest first."""

    trace_id: str
    message_ids: list[str]
    truncated: bool = False  # the trace has more members than one read looks at (REACH_GATEWAY_TRACE_ROWS)


class Health(BaseModel):
    """Whether this gateway can accept work."""

    ok: bool
    registry: str
    replies: str
    directory: str = Field(description="the apps directory: `stopped` means keys may be stale and every "
                           "signed request is answered 503")
