"""`POST /v1/callbacks/{token}`: a reply to an outbound channel message becomes a new envelope in its trace, or, when
the message asked a question (INPUT_REQUIRED: its token names the message, `answers`), the answer to that question.

The token (reach/channels/tokens.py) is the only credential: minted by the channel agent for one outbound
message, signed with REACH_CALLBACK_SECRET, single-use. The reply's JSON object is the new envelope's
payload (less its `capability` member); it goes to the capability the reply names, else the token's default
(the capability whose outcome was called back), else REACH_CALLBACK_DEFAULT_CAPABILITY. A named capability
must be the token's own, the default, or one of REACH_CALLBACK_REPLY_CAPABILITIES (the token is a bearer
credential of whoever received the message: it never reaches any capability of the tenant). The name is checked
as a capability name and against the registry (a live instance serving the token's tenant, the payload
valid for its input schema); `channel.*` is refused, so a reply cannot make Reach send messages. The
envelope keeps the trace (same trace_id, parent_id = the outbound message) and its id is derived from the
outbound message, so a reused token is refused (409) and, should that claim be lost, the same message again.
Replies are metered like signed requests: one token of the tenant's reply bucket (REACH_CALLBACK_RATE /
REACH_CALLBACK_BURST, and the capability's own cap) per reply, 429 with Retry-After when it is empty. The
capability a token names was checked at the door when the message that carries it was sent
(reach/gateway/intake.py): an app can only have replies sent to a capability it may call itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import Counter

from reach.callers import CallerApp
from reach.channels.catalog import CAPABILITY_PREFIX
from reach.channels.settings import ClosureSettings
from reach.channels.tokens import CALLBACKS_PATH, BadToken, ExpiredToken, ReplyClaims, read
from reach.core.turns import AnswerRefused
from reach.envelopes import new_envelope
from reach.errors import InfraUnavailable, ReachError
from reach.gateway import checks
from reach.gateway.bodies import Accepted
from reach.gateway.deps import Remembered
from reach.gateway.intake import Admission, status_url, unavailable_as_503
from reach.gateway.openapi import ERRORS
from reach.gateway.publisher import BrokerRefused
from reach.ops import turns
from reach.records import Envelope

CLAIMS_APP = "reach-callbacks"  # the idempotency store's app scope of used tokens
SOURCE = "gateway:callback"
OUTCOMES = ("accepted", "unknown", "expired", "reused", "refused", "limited")
# the route reads the raw body (it is the new envelope's payload), so it declares the body itself
REPLY_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "additionalProperties": True, "description": "the reply: the new envelope's payload, less "
    "`capability`, which names where it goes (default: the token's capability)",
    "properties": {"capability": {"type": "string"}}}}}}}


def callback_routes(admission: Admission, settings: ClosureSettings) -> APIRouter:
    router = APIRouter(tags=["callbacks"])
    closure = settings
    deps, http = admission.deps, admission.settings
    counted = Counter("agentreach_gateway_callbacks_total", "Inbound replies at /v1/callbacks by outcome",
                      ["outcome"], registry=admission.metrics.registry)
    for outcome in OUTCOMES:
        counted.labels(outcome)

    def claims_of(token: str) -> ReplyClaims:
        key = closure.key()
        if key is None:
            raise checks.Refusal(404, "callbacks_off", "this gateway takes no replies: REACH_CALLBACK_SECRET is not "
                                 "set", "set the same REACH_CALLBACK_SECRET on the gateway and the channel agents")
        try:
            return read(key, token, now=deps.clock_ms())
        except BadToken:
            counted.labels("unknown").inc()
            raise checks.Refusal(404, "unknown_token", "no outbound message has this reply token",
                                 "post the reply to the exact URL of the message's reply_to") from None
        except ExpiredToken as exc:
            counted.labels("expired").inc()
            raise checks.Refusal(410, "expired_token", f"the reply token of message {exc} has expired (tokens "
                                 f"last {closure.ttl_s:,} s)", "the conversation must be started again") from None

    @router.post(CALLBACKS_PATH + "{token}", status_code=202, response_model=Accepted,
                 responses={**ERRORS, 409: {"description": "the token was already used"},
                            410: {"description": "the token has expired"}},
                 openapi_extra=REPLY_BODY,
                 summary="Answer an outbound channel message (unsigned: the token is the credential)")
    async def reply(token: str, request: Request) -> Response:
        """202 once the reply's envelope is on the bus, joined to the outbound message's trace."""
        claims = claims_of(token)
        try:
            async with asyncio.timeout(http.body_timeout):
                raw = await checks.read_body(request.headers.get("content-length"), request.stream(),
                                             http.max_body_bytes)
        except TimeoutError:
            raise checks.Refusal(408, "body_timeout", "the body did not arrive in time") from None
        if claims.answers is not None:  # a question's token: the reply is the answer (reach.ops.turns)
            taken = await _answer(admission, closure, claims, checks.parse_json(raw), counted)
            counted.labels("accepted").inc()
            return Response(taken.model_dump_json().encode(), status_code=202, media_type="application/json")
        try:
            envelope = reply_envelope(admission, claims, checks.parse_json(raw), closure)
        except checks.Refusal:
            counted.labels("refused").inc()
            raise
        await _meter(admission, closure, claims.tenant, envelope.capability, counted)
        accepted = await _publish_once(admission, envelope, claims, counted)
        counted.labels("accepted").inc()
        return Response(accepted.model_dump_json().encode(), status_code=202, media_type="application/json")

    return router


def reply_envelope(admission: Admission, claims: ReplyClaims, document: object,
                   closure: ClosureSettings) -> Envelope:
    """The reply as an envelope of the outbound message's trace, to a checked, live capability."""
    if not isinstance(document, dict):
        raise checks.Refusal(400, "bad_request", "a reply is a JSON object",
                             'send e.g. {"capability": "support.answer", "text": "yes"}')
    payload: dict[str, Any] = dict(document)
    asked = payload.pop("capability", None)
    if asked is not None and not isinstance(asked, str):
        raise checks.Refusal(400, "bad_request", "the reply's `capability` must be a capability name (a string)")
    capability = asked or claims.capability or closure.default_capability
    if not capability:
        raise checks.Refusal(422, "no_capability", "the reply names no capability and neither does its message",
                             'name one: {"capability": "<name>", ...}')
    checks.check_names(capability, "*")
    if capability.startswith(CAPABILITY_PREFIX):
        raise checks.Refusal(403, "forbidden", f"a reply may not be sent to {capability}: channels are not reply "
                             "targets", "name the capability that handles the answer")
    if capability != claims.capability and capability not in closure.reply_targets():
        raise checks.Refusal(403, "forbidden", f"a reply may not be sent to {capability}: a reply goes to its "
                             "message's capability, REACH_CALLBACK_DEFAULT_CAPABILITY or one of "
                             "REACH_CALLBACK_REPLY_CAPABILITIES", "name one of those, or ask an operator to add it")
    body = checks.encode_payload(payload)
    deps = admission.deps
    versions = deps.catalog.versions(capability, claims.tenant, deps.clock_ms())
    contract = checks.check_contract(versions, capability=capability, version_range="*", payload=body, waits=False)
    try:
        envelope = new_envelope(capability, payload, tenant=claims.tenant, source=SOURCE, trace_id=claims.trace_id,
                                parent_id=claims.message_id, idempotency_key=claims.reply_id, schema_version=contract)
    except ReachError as exc:
        raise checks.Refusal(400, "bad_request", str(exc)) from None
    return envelope.model_copy(update={"message_id": claims.reply_id})


async def _answer(admission: Admission, closure: ClosureSettings, claims: ReplyClaims, document: object,
                  counted: Counter) -> Accepted:
    """A reply to a question: the answer to the message it names, checked and taken once as `POST
    /v1/messages/{id}:input` takes it (400 a wrong answer, 409 already answered or not waiting, 410 too late)."""
    store, message_id = admission.deps.turns, str(claims.answers)
    if store is None:
        raise checks.Refusal(503, "unavailable", "this gateway does not take answers")
    await _meter(admission, closure, claims.tenant, claims.capability or "reach.answer", counted)
    try:
        with unavailable_as_503():
            await turns.answer(message_id, document, tenant=claims.tenant, rows=admission.deps.status.message,
                               store=store, now_ms=admission.deps.clock_ms())
    except AnswerRefused as refused:
        counted.labels("refused").inc()
        raise checks.Refusal(refused.status, refused.code, refused.message, refused.hint) from None
    return Accepted(message_id=message_id, trace_id=claims.trace_id, status_url=status_url(message_id))


def replier(tenant: str, closure: ClosureSettings) -> CallerApp:
    """The quota holder of a tenant's replies: the route is unsigned, so the bucket is the token's tenant's."""
    return CallerApp(app_id=f"{CLAIMS_APP}:{tenant}", name=CLAIMS_APP, tenant=tenant, capabilities=(),
                     rate=closure.rate, burst=closure.burst)


async def _meter(admission: Admission, closure: ClosureSettings, tenant: str, capability: str,
                 counted: Counter) -> None:
    """One token of the tenant's reply bucket (and the capability's cap), or 429 with Retry-After."""
    app = replier(tenant, closure)
    with unavailable_as_503():
        decision = await admission.deps.quotas.take(app, capability)
    if not decision.allowed:
        counted.labels("limited").inc()
        admission.metrics.quota_hit(CLAIMS_APP, capability, decision.scope, True)  # one label, not one per tenant
    checks.check_quota(decision, app, capability)


async def _publish_once(admission: Admission, envelope: Envelope, claims: ReplyClaims, counted: Counter) -> Accepted:
    """Claim the token (409 when it was used), publish, then keep the claim until the token expires."""
    store, key = admission.deps.idempotency, claims.message_id
    ids = Remembered("pending", envelope.message_id, envelope.trace_id)
    life_s = max(1, (claims.expires_at - admission.deps.clock_ms()) // 1000 + 1)
    with unavailable_as_503():
        prior = await store.claim(CLAIMS_APP, key, ids, life_s)
    if prior is not None:
        counted.labels("reused").inc()
        raise checks.Refusal(409, "token_used", f"message {claims.message_id} was already answered "
                             f"({prior.message_id}); a reply token is used once", "start a new conversation")
    try:
        await admission.deps.publisher.publish(envelope)
    except (InfraUnavailable, BrokerRefused) as exc:
        with contextlib.suppress(InfraUnavailable):
            await store.release(CLAIMS_APP, key)
        raise checks.Refusal(503, "unavailable", str(exc), "post the reply again",
                             headers={"Retry-After": "1"}) from None
    with contextlib.suppress(InfraUnavailable):  # on the bus already; a repeat is the same message id
        await store.accepted(CLAIMS_APP, key, Remembered("accepted", envelope.message_id, envelope.trace_id), life_s)
    return Accepted(message_id=envelope.message_id, trace_id=envelope.trace_id,
                    status_url=status_url(envelope.message_id))
