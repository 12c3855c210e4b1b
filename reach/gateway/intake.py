"""From signed bytes to an acknowledged envelope: the door's checks in order, then idempotency and publish."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass
from urllib.parse import quote

from reach.a2a.push import PushConfig, TaskPush
from reach.callers import GATEWAY_SOURCE, AuthFailure, CallerApp
from reach.channels.catalog import CAPABILITY_PREFIX
from reach.channels.tokens import named_capabilities
from reach.core.allowance import FIELDS as BUDGET_FIELDS
from reach.core.allowance import cost_micros
from reach.envelopes import BUDGET_MS, new_envelope
from reach.errors import InfraUnavailable, ReachError
from reach.gateway import checks
from reach.gateway.bodies import Accepted, EnvelopeRequest
from reach.gateway.deps import Dependencies, Remembered
from reach.gateway.gate import WEBHOOK, Gate, unavailable_as_503
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.metrics import GatewayMetrics
from reach.gateway.ports import Verified
from reach.gateway.publisher import BrokerRefused
from reach.intent.catalog import RESERVED as INTENT_CAPABILITY
from reach.records import Envelope, RoutingHints

STATUS_PATH = "/v1/messages/"
PROGRESS_CONFIG = "callback-progress"  # the push config id of a `callback_progress` request
CALLBACK_CHANNEL = WEBHOOK  # the gateway's `callback` is a URL: a webhook
log = logging.getLogger("reach.gateway")
# The refusals decided by the request's own bytes alone, so the same bytes are refused the same way whenever they
# come again: their nonce is given back (issue 28, finding 4). Other 400s depend on what time or an operator can
# change, and keep it: `refused_by_broker` (a topic's max.message.bytes can be raised), `progress_off` (the push
# topic can be created), `invalid_answer` (the message's next question may take the same answer).
RELEASING = frozenset({"bad_request", "bad_json", "payload_too_large", "answer_too_large"})


def status_url(message_id: str) -> str:
    return STATUS_PATH + quote(message_id, safe="")


def source_of(app: CallerApp) -> str:
    return f"{GATEWAY_SOURCE}{app.app_id}"


def envelope_idempotency_key(app: CallerApp, key: str) -> str:
    """What agents deduplicate on: scoped by app, so two apps' equal keys never collide."""
    return f"{source_of(app)}:{key}"


@dataclass(frozen=True, slots=True)
class Admitted:
    """An envelope that passed every check, ready to publish."""

    app: CallerApp
    envelope: Envelope
    idempotency_key: str | None
    progress_to: str | None = None  # `callback_progress`: the callback URL also gets the progress (reach.a2a.push)


def fingerprint(envelope: Envelope) -> str:
    """What a request asked for, as a digest: a repeated idempotency_key must come with the same request.
    The payload is compared as JSON (key order and spacing do not count); ids and timestamps are not part of it."""
    try:
        payload: object = json.loads(envelope.payload)
    except ValueError:
        payload = envelope.payload.hex()
    asked = {"capability": envelope.capability, "version": envelope.capability_version, "payload": payload,
             "routing": envelope.routing.model_dump(mode="json"), "callback": envelope.callback,
             "expire_at": envelope.expire_at}
    # a budget counts only when set: the digests of requests without one stay those stored before budgets existed
    asked.update({name: getattr(envelope, name) for name in BUDGET_FIELDS if getattr(envelope, name) is not None})
    return hashlib.sha256(json.dumps(asked, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


class Admission:
    """The door's checks (reach.gateway.checks) with their I/O: the authenticator's nonce and the quota are
    asyncio Redis calls on the event loop (no thread hop per request), the registry is read in memory, the
    ack is awaited. The per-app checks every surface shares are `gate` (reach.gateway.gate)."""

    def __init__(self, deps: Dependencies, settings: HttpSettings, metrics: GatewayMetrics) -> None:
        self.deps = deps
        self.settings = settings
        self.metrics = metrics
        self.gate = Gate(deps, metrics, streams_per_app=settings.sse_per_app,
                         sessions_per_app=settings.mcp_sessions_per_app, waits_per_app=settings.waits_per_app)
        # a claim outlives the longest wait for an ack; a claim orphaned by a crash frees itself that soon
        self._pending_ttl = int(settings.ack_timeout * 2) + 5

    def screen(self, key_id: str | None, signature: str | None) -> None:
        """Refuse (401) what the headers alone condemn, before any body byte is read."""
        outcome = self.deps.authenticator.screen(key_id=key_id, signature=signature, now=self.deps.clock_ms() // 1000)
        if isinstance(outcome, AuthFailure):
            raise checks.refuse_auth(outcome)

    async def authenticate(self, key_id: str | None, signature: str | None, raw: bytes, *, method: str,
                           target: str) -> Verified:
        with unavailable_as_503():
            outcome = await self.deps.authenticator.authenticate(key_id=key_id, signature=signature, method=method,
                                                                  target=target, body=raw,
                                                                  now=self.deps.clock_ms() // 1000)
        if not isinstance(outcome, Verified):
            raise checks.refuse_auth(outcome)
        return outcome

    async def refused_after_auth(self, verified: Verified | None, refusal: checks.Refusal) -> None:
        """A verified request refused for what its own bytes say (400 malformed, 413 too large: `RELEASING`, the
        same request is refused the same way whenever it comes again) gives its nonce back, so such refusals hold no
        Redis memory (issue 28, finding 4). Every other refusal keeps it for the signature window: a refusal that
        time or an operator can change (429 quota or spend, 403, 404, 409, 422, 5xx, and the 400s a broker, a
        missing topic or a message's next question decide) would let a captured request be replayed once it would
        pass (issue 37, finding 6 and L4); a 401 never frees the original's nonce."""
        if verified is None or refusal.status not in (400, 413) or refusal.body.error not in RELEASING:
            return
        with contextlib.suppress(InfraUnavailable):  # unreleased, the nonce expires with its window
            await self.deps.authenticator.release(verified)

    async def take_read(self, app: CallerApp, rows: int = 1) -> None:
        """A read's tokens (429 + Retry-After when the app's read bucket is empty, 503 when Redis does not answer)."""
        await self.gate.read(app, rows)

    async def admit(self, app: CallerApp, request: EnvelopeRequest, *, reply_to: str | None = None,
                    default_budget_ms: int = BUDGET_MS) -> Admitted:
        """Size, permission, quota, capability, schema; then the Envelope, stamped with the app's tenant."""
        checks.check_names(request.capability, request.version)
        if request.callback_progress:
            self._check_progress(request)
        payload = checks.encode_payload(request.payload)
        self.gate.may_call(app, request.capability)
        self._check_channel_names(app, request)
        if request.capability == INTENT_CAPABILITY and app.capabilities:
            # the resolver picks the capability and knows nothing of the app: an app held to a list of
            # capabilities would reach any other through an intent
            raise checks.Refusal(403, "forbidden", f"app {app.app_id} may call only {', '.join(app.capabilities)}; "
                                 "an intent may resolve to any capability", "name the capability instead, or ask an "
                                 "operator for an app without a capability list (`reach apps`)")
        now = self.deps.clock_ms()
        await self._check_budget(app, now)
        versions = self.deps.catalog.versions(request.capability, app.tenant, now)
        await self.gate.write(app, request.capability, known=bool(versions))
        if request.callback_progress:  # a push config, as an A2A one: channel.webhook's right and a token of its quota
            await self.gate.push(app)
        waits = request.expire_at is not None and request.expire_at > now
        contract = None
        if request.capability != INTENT_CAPABILITY:  # an intent's capability is known only once it is resolved
            contract = checks.check_contract(versions, capability=request.capability, version_range=request.version,
                                             payload=payload, waits=waits)
        return Admitted(app, self._envelope(app, request, reply_to, default_budget_ms, contract),
                        request.idempotency_key, progress_to=request.callback if request.callback_progress else None)

    async def authorize_answer(self, app: CallerApp, capability: str) -> None:
        """An answer runs the message's next turn: the app must be allowed the capability, within its spend limits,
        and it takes a token of the capability's quota, as a send does (403 / 429 otherwise)."""
        self.gate.may_call(app, capability)
        await self.gate.spend(app, self.deps.clock_ms())
        await self.gate.write(app, capability)

    async def _check_budget(self, app: CallerApp, now: int) -> None:
        """429 budget_exceeded once one of the app's spend limits is reached (reach.gateway.budgets)."""
        await self.gate.spend(app, now)

    @staticmethod
    def _check_channel_names(app: CallerApp, request: EnvelopeRequest) -> None:
        """A callback, and the capability a channel request's reply token would name, stay within what the app
        may call: an app limited to `channel.webhook` must not mint a token that replies to `billing.refund`,
        and an app with a capability list sets a `callback` only when it lists `channel.webhook`."""
        if request.callback is not None and app.capabilities:
            Gate.may_call(app, CALLBACK_CHANNEL)
        if request.capability.startswith(CAPABILITY_PREFIX):
            for named in named_capabilities(request.payload):
                if not app.may_call(named):
                    raise checks.Refusal(403, "forbidden", f"app {app.app_id} may not call {named}, so its channel "
                                         "message may not name it for replies (reply_capability / callback_for)",
                                         "name a capability the app may call, or ask an operator to add it")

    def _envelope(self, app: CallerApp, request: EnvelopeRequest, reply_to: str | None, budget: int,
                  contract: str | None) -> Envelope:
        hints = request.routing
        try:
            envelope = new_envelope(
                request.capability, request.payload, version=request.version, session_key=hints.session_key,
                region=hints.region, tags=hints.tags, tenant=app.tenant, source=source_of(app),
                budget_ms=request.budget_ms or budget, expire_at=request.expire_at, reply_to=reply_to,
                intent=request.intent, max_tokens=request.max_tokens,
                max_cost_micros=cost_micros(request.max_cost) if request.max_cost is not None else None,
                idempotency_key=(envelope_idempotency_key(app, request.idempotency_key)
                                 if request.idempotency_key else None),
                schema_version=contract,  # the contract version the payload was checked against at the door
            )
        except ReachError as exc:  # checked above; a rule added to new_envelope later still answers 400
            raise checks.Refusal(400, "bad_request", str(exc)) from None
        routing = RoutingHints(region=hints.region, session_key=hints.session_key, tags=hints.tags,
                               priority=hints.priority, canary=hints.canary)
        return envelope.model_copy(update={"routing": routing, "callback": request.callback})

    def _check_progress(self, request: EnvelopeRequest) -> None:
        if request.callback is None:
            raise checks.Refusal(400, "bad_request", "callback_progress needs a callback: the URL the progress goes to",
                                 "add callback, or leave callback_progress out")
        if self.deps.push is None:
            raise checks.Refusal(400, "progress_off", "progress callbacks are off on this gateway (its <ns>.push topic "
                                 "does not exist)", "leave callback_progress out, or ask an operator to run "
                                 "`reach topics apply`")

    async def _keep_progress(self, env: Envelope, url: str) -> None:
        """The message's progress goes to its callback URL: a push config (reach.a2a.push) sending only progress,
        kept before the envelope is published; the ending still comes as the callback itself."""
        assert self.deps.push is not None
        config = PushConfig(id=PROGRESS_CONFIG, url=url, states=False, progress=True, created_at=env.created_at)
        try:
            await self.deps.push.put(TaskPush(task_id=env.message_id, tenant=env.tenant, configs=(config,)))
        except InfraUnavailable as exc:
            raise checks.Refusal(503, "unavailable", f"the progress callback was not kept: {exc}", "retry",
                                 headers={"Retry-After": "1"}) from None

    async def publish(self, admitted: Admitted) -> Accepted:
        """202 material once the broker acknowledged; a repeated idempotency_key gets the first request's ids."""
        env, key, app = admitted.envelope, admitted.idempotency_key, admitted.app
        ids = Remembered("pending", env.message_id, env.trace_id, fingerprint(env))
        if key is not None:
            with unavailable_as_503():
                prior = await self.deps.idempotency.claim(app.app_id, key, ids, self._pending_ttl)
            if prior is not None:
                if prior.fingerprint and prior.fingerprint != ids.fingerprint:
                    raise checks.Refusal(422, "idempotency_key_reused", f"idempotency_key {key!r} was first used "
                                         "for a different request (capability, version, payload, routing or "
                                         "callback differ)", "send a new idempotency_key for a new request")
                if prior.state == "accepted":
                    return Accepted(message_id=prior.message_id, trace_id=prior.trace_id,
                                    status_url=status_url(prior.message_id))
                raise checks.Refusal(409, "in_flight", f"a request with idempotency_key {key!r} is still waiting for "
                                     "the broker's acknowledgement", "retry in a second with the same key")
        if admitted.progress_to is not None and self.deps.push is not None:
            await self._keep_progress(env, admitted.progress_to)  # before the message exists: no chunk comes first
        try:
            await self.deps.publisher.publish(env)
        except (InfraUnavailable, BrokerRefused) as exc:
            if key is not None:
                with contextlib.suppress(InfraUnavailable):  # unreleased, the pending claim expires on its own
                    await self.deps.idempotency.release(app.app_id, key)
            if isinstance(exc, BrokerRefused):
                raise checks.Refusal(400, "refused_by_broker", str(exc)) from None
            raise checks.Refusal(503, "unavailable", str(exc), "retry with the same idempotency_key",
                                 headers={"Retry-After": "1"}) from None
        if key is not None:
            try:
                await self.deps.idempotency.accepted(app.app_id, key, Remembered("accepted", env.message_id,
                                                                                  env.trace_id, ids.fingerprint),
                                                     self.settings.idempotency_ttl)
            except InfraUnavailable as exc:
                # the broker has it: still a 202. A repeat after the pending claim expires is published again
                # with the same envelope idempotency_key, which the agents deduplicate.
                log.warning("idempotency key %r of %s not recorded: %s", key, app.app_id, exc)
        return Accepted(message_id=env.message_id, trace_id=env.trace_id, status_url=status_url(env.message_id))
