"""Channel agents: an agent-SDK Agent serving `channel.<name>` through one provider configuration.

The request payload is `{"endpoint", "body", "subject"?, "callback_for"?}` (a callback envelope from the
status fold has all of them). A send the provider accepted writes SENT, and DELIVERED once it confirms;
for a callback, CALLBACKED on the original message. A failed send becomes the SDK's outcome: 429 a
retryable failure with code RATE_LIMITED, a timeout / 5xx / refused connection a retryable one, any other
refusal a FAILED one with the reason. Each instance keeps channel health (reach/channels/health.py) per
tenant and destination from its own sends: while the request's (tenant, destination) is OPEN, a request
that names a `backup` is handed over to the backup channel (a new envelope in the same trace, parent = this
message) instead of being sent; without one it fails retryably with code CHANNEL_OPEN.

Whose fault a failure is: a webhook's receiver was chosen by the caller, so its failures (429, 5xx, timeouts,
and CHANNEL_OPEN for its host) carry error kind DESTINATION, which the router's instance health does not count
(reach/core/healthmodel/calls.py): one tenant's receiver never takes the instance out of routing for others.
Email and SMS go through the operator's provider: their 429s and CHANNEL_OPEN stay OVERLOAD-class (three within
10 s open the instance's breaker), as a provider outage is the instance's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from reach.agent import Agent, BusinessError, Context, Reject, TransientError
from reach.agent.publisher import Publisher, Sender
from reach.channels import board
from reach.channels.catalog import CAPABILITY_VERSION, Channel, channel
from reach.channels.closure import SOURCE as CLOSURE_SOURCE
from reach.channels.errors import BadCallback, ChannelMisconfigured
from reach.channels.health import ChannelHealth, ChannelRules, ChannelState, Destinations
from reach.channels.provider import Failure, FailureKind, OutboundMessage, Provider, Sent, probeable
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.channels.spec import Target, target
from reach.channels.steps import Closes, DeliverySteps
from reach.channels.tokens import ReplyClaims, answers_of, mint, reply_capability, reply_url
from reach.core.redact import redact
from reach.envelopes import BUDGET_MS, DELIVERY_TIMEOUT_MS, now_ms
from reach.kafka import clients
from reach.names import Names
from reach.records import ChannelDelivery, Envelope, Status
from reach.redisclient import AsyncRedis, async_client
from reach.settings import KafkaSettings, ReachSettings, RedisSettings

log = logging.getLogger("reach.channels")

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["endpoint", "body"], "additionalProperties": False,
    "properties": {
        "endpoint": {"type": "string", "minLength": 1, "maxLength": 2048},
        "body": {"type": "object"},
        "subject": {"type": "string", "maxLength": 500},
        "callback_for": {"type": "object", "required": ["message_id", "generation", "capability"],
                         "properties": {"message_id": {"type": "string"}, "generation": {"type": "integer"},
                                        "capability": {"type": "string"}}},
        "backup": {"type": "object"},
        "handed_over_from": {"type": "string"},
        "reply_capability": {"type": "string", "maxLength": 200},
        "answer_for": {"type": "object", "required": ["message_id", "generation"],
                       "properties": {"message_id": {"type": "string"}, "generation": {"type": "integer"}}},
        # extra headers of a webhook: only the names reach.channels.poster.EXTRA allows (an A2A push's token)
        "headers": {"type": "object", "maxProperties": 4,
                    "additionalProperties": {"type": "string", "maxLength": 1024}},
    },
}


DESTINATION_KIND = "DESTINATION"  # an error kind the router's instance health does not count against the instance


def signal_for(failure: Failure, *, destination: bool = False) -> Exception:
    """The SDK signal a failed send raises (its receipt: ATTEMPT_FAILED retryable, or FAILED); its text never
    carries the endpoint's credentials, whatever the provider put in the reason. `destination`: the caller chose
    where the send went, so a retryable failure is the destination's (kind DESTINATION), not the instance's."""
    reason = redact(failure.reason)
    if failure.kind is FailureKind.PERMANENT:
        return BusinessError(failure.code, reason)
    return TransientError(reason, code=failure.code, retry_after=failure.retry_after_s,
                          kind=DESTINATION_KIND if destination else "TRANSIENT")


class ChannelService:
    """One channel's handler: the provider, and where its delivery steps go."""

    def __init__(self, kind: Channel, provider: Provider, steps: DeliverySteps | None = None, *,
                 health: ChannelHealth | ChannelRules | None = None, clock: Callable[[], int] = now_ms,
                 closure: ClosureSettings) -> None:
        self.kind = kind
        self.closure = closure
        self.clock = clock
        self.provider = provider
        self.steps = steps
        rules = health.rules if isinstance(health, ChannelHealth) else health
        self.destinations = Destinations(rules or ChannelRules())
        self.counts = board.Counts()

    @property
    def health(self) -> ChannelHealth:
        """The health of the instance's worst (tenant, destination) now: what its board row shows."""
        return self.destinations.worst(self.clock())

    async def handle(self, payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        try:
            endpoint = self.kind.check_endpoint(payload["endpoint"])
            backup = target(payload["backup"], primary=self.kind.name) if "backup" in payload else None
        except BadCallback as exc:
            raise Reject(str(exc), code="BAD_ENDPOINT") from None
        envelope = ctx.envelope
        health = self.destinations.of(envelope.tenant, self.kind.destination(endpoint))
        probing = False
        if health.state(self.clock()) is ChannelState.OPEN:
            if not health.probe_due(self.clock()):
                return await self._while_open(payload, ctx, backup, health)
            probing = True  # this real send is the probe: its outcome decides whether the channel closes
        reply = self.reply_url(envelope, payload)
        body = {**payload["body"], "reply_to": reply} if reply else payload["body"]
        message = OutboundMessage(endpoint=endpoint, body=body, message_id=envelope.message_id,
                                  trace_id=envelope.trace_id, subject=payload.get("subject", ""), reply_url=reply,
                                  tenant=envelope.tenant, headers=tuple(sorted((payload.get("headers") or {}).items())))
        started = time.monotonic()
        outcome = await self.provider.send(message)
        self._observe(health, outcome, (time.monotonic() - started) * 1000, probing)
        if isinstance(outcome, Failure):
            log.info("%s send of %s failed: %s %s", self.kind.name, envelope.message_id, outcome.code,
                     redact(outcome.reason))
            if backup is not None and health.state(self.clock()) is ChannelState.OPEN:
                return await self._while_open(payload, ctx, backup, health)
            raise signal_for(outcome, destination=self.kind.caller_chosen)
        delivered = await self._record(outcome, ctx, payload, health)
        self.counts.reply_urls += bool(reply)  # sent with a reply URL: one that may be answered
        return {"channel": self.kind.name, "provider_message_id": outcome.provider_message_id, "delivered": delivered}

    async def idle_probe(self) -> int:
        """Probe the provider when a destination of it is idle (health.py, idle probes) and feed the result to
        every such destination; the number fed. Channels whose callers choose the destination (webhooks) and
        providers with no probe are never probed idle."""
        prober = probeable(self.provider)
        if prober is None or self.kind.caller_chosen:
            return 0
        due = self.destinations.idle(self.kind.destination(""), self.clock())
        if not due:
            return 0
        failure = await prober.probe()
        now = self.clock()
        for health in due:
            health.idle_probe(now, ok=failure is None, reason="" if failure is None else redact(failure.reason))
        if failure is not None:
            log.warning("%s idle probe failed: %s %s", self.kind.name, failure.code, redact(failure.reason))
        return len(due)

    def reply_url(self, envelope: Envelope, payload: dict[str, Any]) -> str:
        """Where a reply to this message is posted (its token minted now), or "" when replies are off."""
        key, base = self.closure.key(), self.closure.base_url
        if key is None or not base:
            return ""
        claims = ReplyClaims(message_id=envelope.message_id, trace_id=envelope.trace_id, tenant=envelope.tenant,
                             expires_at=self.clock() + self.closure.ttl_s * 1000,
                             capability=reply_capability(payload),
                             # only the status fold's question may make a reply an answer: a caller's own channel
                             # request naming `answer_for` would mint a token answering any message of its tenant
                             answers=answers_of(payload) if envelope.source == CLOSURE_SOURCE else None)
        return reply_url(base, mint(key, claims))

    def _observe(self, health: ChannelHealth, outcome: Sent | Failure, latency_ms: float, probing: bool) -> None:
        """Feed the destination's health: a probe's pass or fail, else the send's signals."""
        ok = isinstance(outcome, Sent)
        if probing:
            health.probe(self.clock(), ok=ok)
        elif isinstance(outcome, Sent):
            health.send(self.clock(), ok=True, latency_ms=latency_ms,
                        provider_message_id=outcome.provider_message_id,
                        expects_report=not (outcome.delivered or outcome.reported_later))
        else:
            health.send(self.clock(), ok=False, latency_ms=latency_ms,
                        rate_limited=outcome.kind is FailureKind.RATE_LIMITED)

    async def _while_open(self, payload: dict[str, Any], ctx: Context, backup: Target | None,
                          health: ChannelHealth) -> dict[str, Any]:
        """The request's destination is OPEN: hand the message to the backup channel, or fail it retryably."""
        reason = health.breaker.reason or "open"
        if backup is None:
            raise TransientError(f"channel {self.kind.name} is OPEN for this destination on this instance ({reason}) "
                                 "and the request names no backup channel", code="CHANNEL_OPEN",
                                 kind=DESTINATION_KIND if self.kind.caller_chosen else "TRANSIENT")
        envelope = hand_over(ctx.envelope, payload, backup, source=ctx.agent_id)
        await self._steps().hand_over(envelope)
        log.info("%s is OPEN (%s): %s handed over to %s as %s", self.kind.name, reason, ctx.envelope.message_id,
                 backup.channel, envelope.message_id)
        return {"channel": self.kind.name, "handed_over_to": backup.channel, "message_id": envelope.message_id}

    async def _record(self, sent: Sent, ctx: Context, payload: dict[str, Any], health: ChannelHealth) -> bool:
        info = ChannelDelivery(channel=self.kind.name, provider_message_id=sent.provider_message_id)
        steps = self._steps()
        await steps.step(ctx.envelope, Status.SENT, info)
        if not await self.provider.delivered(sent):
            return False
        health.report(sent.provider_message_id)
        await steps.step(ctx.envelope, Status.DELIVERED, info)
        self.counts.delivered += 1
        closes = payload.get("callback_for")
        parent = ctx.envelope.parent_id
        if closes is not None and parent is not None and parent in (closes["message_id"],
                                                                     payload.get("handed_over_from")):
            await steps.callbacked(ctx.envelope, Closes(message_id=closes["message_id"],
                                                        generation=int(closes["generation"]),
                                                        capability=str(closes["capability"])), info)
            self.counts.callbacked += 1
        return True

    def _steps(self) -> DeliverySteps:
        if self.steps is None:
            raise RuntimeError("the channel agent has not started (no receipts producer yet)")
        return self.steps


def hand_over(envelope: Envelope, payload: dict[str, Any], backup: Target, *, source: str) -> Envelope:
    """The backup channel's envelope for `envelope` (id `<message_id>-bk`: the same on a retry, so deduped)."""
    body = {k: v for k, v in payload.items() if k in ("body", "subject", "callback_for", "answer_for",
                                                       "reply_capability", "headers")}
    body.update(endpoint=backup.endpoint, handed_over_from=envelope.message_id)
    created = now_ms()
    mid = f"{envelope.message_id}-bk"
    return Envelope(
        message_id=mid, trace_id=envelope.trace_id, parent_id=envelope.message_id, tenant=envelope.tenant,
        source=source, capability=channel(backup.channel).capability, capability_version=f"^{CAPABILITY_VERSION}",
        payload=json.dumps(body, separators=(",", ":")).encode(), created_at=created, deadline=created + BUDGET_MS,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS, idempotency_key=mid,
    )


class BoardWriter:
    """Writes this instance's channel health snapshot to Redis every `interval_s` (reach/channels/board.py)."""

    def __init__(self, service: ChannelService, *, agent: Agent, namespace: str, redis: RedisSettings,
                 interval_s: float = 5.0) -> None:
        self._service, self._agent, self._namespace, self._interval = service, agent, namespace, interval_s
        self._redis_settings = redis
        self._task: asyncio.Task[None] | None = None
        self._redis: AsyncRedis | None = None

    def current(self) -> board.Snapshot:
        now = self._service.clock()
        destinations = self._service.destinations
        return board.snapshot(destinations.worst(now), channel=self._service.kind.name,
                              instance_id=self._agent.instance_id, agent_id=self._agent.agent_id, now=now,
                              open_destinations=destinations.open(now))

    async def start(self) -> None:
        self._redis = async_client(self._redis_settings.url(), socket_timeout=2, socket_connect_timeout=2)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        assert self._redis is not None
        ttl = max(1, int(self._interval * 4))
        while True:
            try:
                await self._redis.set(board.key(self._namespace, self._agent.instance_id),
                                      board.encode(self.current()), ex=ttl)
            except RedisError as exc:  # the board is a cache: a missed write only leaves it stale until the next
                log.warning("channel health not written to Redis: %s", exc)
            except Exception:  # noqa: BLE001 - a bug here must not end the board for good: the next write tries again
                log.exception("channel health snapshot failed")
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._redis is not None:
            with contextlib.suppress(RedisError):
                await self._redis.delete(board.key(self._namespace, self._agent.instance_id))
            await self._redis.aclose()


class IdleProber:
    """Runs the service's idle probe every `interval_s` (a tenth of the idle period, at most 5 s) while the
    agent runs."""

    def __init__(self, service: ChannelService) -> None:
        self._service = service
        self._interval = min(5.0, service.destinations.rules.idle_probe_every_ms / 10_000)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if probeable(self._service.provider) is not None and not self._service.kind.caller_chosen:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._service.idle_probe()
            except Exception:  # noqa: BLE001 - a bug here must not end the probes for good
                log.exception("%s idle probe raised", self._service.kind.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def channel_agent(name: str, *, settings: ChannelSettings, kafka: KafkaSettings, redis: RedisSettings,
                  reach: ReachSettings, closure: ClosureSettings,
                  sender: Sender | None = None, provider: Provider | None = None,
                  health: ChannelRules | None = None,
                  board_interval_s: float = 5.0, **agent_args: Any) -> Agent:
    """An Agent serving `channel.<name>`; its provider is built from `settings` now (a misconfiguration fails
    here), its receipts producer on start (or `sender`, for tests)."""
    kind = channel(name)
    if (closure.key() is None) != (closure.base_url is None):
        raise ChannelMisconfigured("replies need both REACH_CALLBACK_SECRET and REACH_CALLBACK_BASE_URL on a channel "
                                   "agent (one of them is set); set both, or neither to send no reply URLs.")
    service = ChannelService(kind, provider or kind.provider(settings),
                             health=health or ChannelRules(), closure=closure)
    agent = Agent(kind.agent_id, **agent_args)
    names = Names(reach.namespace)
    own: list[Publisher] = []
    writer = BoardWriter(service, agent=agent, namespace=names.namespace, redis=redis, interval_s=board_interval_s)
    prober = IdleProber(service)

    async def start() -> None:
        chosen = sender
        if chosen is None:
            publisher = Publisher(clients.producer(kafka, profile="hot"))
            own.append(publisher)
            chosen = publisher
        service.steps = DeliverySteps(chosen, names=names, agent_id=agent.agent_id, instance_id=agent.instance_id)
        runner = getattr(agent, "_runner", None)  # the SDK's own metrics registry, served on its metrics port
        if runner is not None:
            runner.metrics.registry.register(board.HealthCollector(writer.current, service.counts))
        await writer.start()
        await prober.start()

    async def stop() -> None:
        await prober.stop()
        await writer.stop()
        await service.provider.aclose()
        for publisher in own:
            publisher.close()

    agent.on_start(start)
    agent.on_stop(stop)
    agent.capability(kind.capability, version=CAPABILITY_VERSION, input_schema=INPUT_SCHEMA,
                     tags=["channel", kind.name])(service.handle)
    return agent
