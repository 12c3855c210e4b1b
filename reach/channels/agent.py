"""Channel agents: an agent-SDK Agent serving `channel.<name>` through one provider configuration.

The request payload is `{"endpoint", "body", "subject"?, "callback_for"?}` (a callback envelope from the
status fold has all of them). A send the provider accepted writes SENT, and DELIVERED once it confirms;
for a callback, CALLBACKED on the original message. A failed send becomes the SDK's outcome: 429 a
retryable failure with code RATE_LIMITED (OVERLOAD class: three within 10 s open the instance's breaker),
a timeout / 5xx / refused connection a retryable one, any other refusal a FAILED one with the reason.
"""

from __future__ import annotations

import logging
from typing import Any

from reach import clients
from reach.agent import Agent, BusinessError, Context, Reject, TransientError
from reach.agent.publisher import Publisher, Sender
from reach.channels.catalog import CAPABILITY_VERSION, Channel, channel
from reach.channels.errors import BadCallback
from reach.channels.provider import Failure, FailureKind, OutboundMessage, Provider, Sent
from reach.channels.settings import ChannelSettings
from reach.channels.steps import Closes, DeliverySteps
from reach.names import Names
from reach.records import ChannelDelivery, Status
from reach.settings import KafkaSettings, ReachSettings

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
    },
}


def signal_for(failure: Failure) -> Exception:
    """The SDK signal a failed send raises (its receipt: ATTEMPT_FAILED retryable, or FAILED)."""
    if failure.kind is FailureKind.PERMANENT:
        return BusinessError(failure.code, failure.reason)
    return TransientError(failure.reason, code=failure.code, retry_after=failure.retry_after_s)


class ChannelService:
    """One channel's handler: the provider, and where its delivery steps go."""

    def __init__(self, kind: Channel, provider: Provider, steps: DeliverySteps | None = None) -> None:
        self.kind = kind
        self.provider = provider
        self.steps = steps

    async def handle(self, payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        try:
            endpoint = self.kind.check_endpoint(payload["endpoint"])
        except BadCallback as exc:
            raise Reject(str(exc), code="BAD_ENDPOINT") from None
        envelope = ctx.envelope
        message = OutboundMessage(endpoint=endpoint, body=payload["body"], message_id=envelope.message_id,
                                  trace_id=envelope.trace_id, subject=payload.get("subject", ""))
        outcome = await self.provider.send(message)
        if isinstance(outcome, Failure):
            log.info("%s send of %s failed: %s %s", self.kind.name, envelope.message_id, outcome.code, outcome.reason)
            raise signal_for(outcome)
        delivered = await self._record(outcome, ctx, payload.get("callback_for"))
        return {"channel": self.kind.name, "provider_message_id": outcome.provider_message_id, "delivered": delivered}

    async def _record(self, sent: Sent, ctx: Context, closes: dict[str, Any] | None) -> bool:
        info = ChannelDelivery(channel=self.kind.name, provider_message_id=sent.provider_message_id)
        steps = self._steps()
        await steps.step(ctx.envelope, Status.SENT, info)
        if not await self.provider.delivered(sent):
            return False
        await steps.step(ctx.envelope, Status.DELIVERED, info)
        if closes is not None and closes["message_id"] == ctx.envelope.parent_id:
            await steps.callbacked(ctx.envelope, Closes(message_id=closes["message_id"],
                                                        generation=int(closes["generation"]),
                                                        capability=str(closes["capability"])), info)
        return True

    def _steps(self) -> DeliverySteps:
        if self.steps is None:
            raise RuntimeError("the channel agent has not started (no receipts producer yet)")
        return self.steps


def channel_agent(name: str, *, settings: ChannelSettings | None = None, kafka: KafkaSettings | None = None,
                  sender: Sender | None = None, provider: Provider | None = None, **agent_args: Any) -> Agent:
    """An Agent serving `channel.<name>`; its provider is built from `settings` now (a misconfiguration fails
    here), its receipts producer on start (or `sender`, for tests)."""
    kind = channel(name)
    service = ChannelService(kind, provider or kind.provider(settings or ChannelSettings()))
    agent = Agent(kind.agent_id, **agent_args)
    names = Names(ReachSettings().namespace)
    own: list[Publisher] = []

    def start() -> None:
        chosen = sender
        if chosen is None:
            publisher = Publisher(clients.producer(kafka or KafkaSettings()))
            own.append(publisher)
            chosen = publisher
        service.steps = DeliverySteps(chosen, topic=names.receipts, agent_id=agent.agent_id,
                                      instance_id=agent.instance_id)

    async def stop() -> None:
        await service.provider.aclose()
        for publisher in own:
            publisher.close()

    agent.on_start(start)
    agent.on_stop(stop)
    agent.capability(kind.capability, version=CAPABILITY_VERSION, input_schema=INPUT_SCHEMA,
                     tags=["channel", kind.name])(service.handle)
    return agent
