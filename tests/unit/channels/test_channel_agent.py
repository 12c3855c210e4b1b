"""The channel handler with a fake provider and sender: delivery steps, CALLBACKED, and failures as signals."""

from __future__ import annotations

import asyncio
import json

import pytest

from reach.agent import BusinessError, Context, Reject, TransientError
from reach.agent.outcomes import Outcome, from_exception
from reach.breaker import Outcome as Health
from reach.channels.agent import ChannelService, channel_agent, signal_for
from reach.channels.catalog import channel
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent
from reach.channels.steps import DeliverySteps
from reach.codec import decode_dict, encode
from reach.envelopes import new_envelope
from reach.health.calls import call_of
from reach.records import Envelope, Status
from tests.unit.agent.fakes import FakeSender


class FakeProvider:
    """Answers every send with `outcome`; `confirms` says whether delivery is confirmed."""

    channel = "sms"

    def __init__(self, outcome: SendOutcome, *, confirms: bool = True) -> None:
        self.outcome = outcome
        self.confirms = confirms
        self.sent: list[OutboundMessage] = []

    async def send(self, message: OutboundMessage) -> SendOutcome:
        self.sent.append(message)
        return self.outcome

    async def delivered(self, sent: Sent) -> bool:
        return self.confirms

    async def aclose(self) -> None:
        return None


def service(provider: FakeProvider) -> tuple[ChannelService, FakeSender]:
    sender = FakeSender()
    steps = DeliverySteps(sender, topic="ns.receipts", agent_id="agent://channels/sms", instance_id="i1")
    return ChannelService(channel("sms"), provider, steps), sender


def ctx(envelope: Envelope) -> Context:
    return Context(envelope=envelope, agent_id="agent://channels/sms", instance_id="i1")


def callback_envelope() -> Envelope:
    payload = {"endpoint": "+15551234567", "body": {"text": "hi"},
               "callback_for": {"message_id": "orig", "generation": 0, "capability": "demo.echo"}}
    env = new_envelope("channel.sms", payload, parent_id="orig", trace_id="t1")
    return env.model_copy(update={"message_id": "orig-cb0"})


def test_a_confirmed_callback_writes_sent_delivered_and_callbacked() -> None:
    svc, sender = service(FakeProvider(Sent(provider_message_id="p-9")))
    env = callback_envelope()
    result = asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    assert result == {"channel": "sms", "provider_message_id": "p-9", "delivered": True}
    got = [(r.message_id, r.status, r.channel.provider_message_id if r.channel else None) for r in sender.receipts()]
    assert got == [("orig-cb0", Status.SENT, "p-9"), ("orig-cb0", Status.DELIVERED, "p-9"),
                   ("orig", Status.CALLBACKED, "p-9")]
    callbacked = sender.receipts()[-1]
    assert callbacked.trace_id == "t1" and callbacked.channel is not None
    assert callbacked.channel.callback_id == "orig-cb0"
    assert callbacked.instance_id is None  # not a call of this instance: health does not count it
    assert call_of(decode_dict("Receipt", encode(callbacked))) is None


def test_an_unconfirmed_send_is_only_sent() -> None:
    svc, sender = service(FakeProvider(Sent(provider_message_id="p-1"), confirms=False))
    env = callback_envelope()
    assert asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))["delivered"] is False
    assert [r.status for r in sender.receipts()] == [Status.SENT]


def test_callback_for_another_message_than_the_parent_writes_no_callbacked() -> None:
    svc, sender = service(FakeProvider(Sent(provider_message_id="p-1")))
    env = callback_envelope().model_copy(update={"parent_id": "someone-else"})
    asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    assert Status.CALLBACKED not in [r.status for r in sender.receipts()]


def test_a_bad_endpoint_is_rejected_before_any_send() -> None:
    provider = FakeProvider(Sent(provider_message_id="p"))
    svc, sender = service(provider)
    env = callback_envelope()
    with pytest.raises(Reject, match="not a phone number"):
        asyncio.run(svc.handle({"endpoint": "nope", "body": {}}, ctx(env)))
    assert provider.sent == [] and sender.sent == []


def test_a_rate_limited_send_is_an_overload_class_retryable_failure() -> None:
    svc, sender = service(FakeProvider(Failure(FailureKind.RATE_LIMITED, "RATE_LIMITED", "429", retry_after_s=1)))
    env = callback_envelope()
    with pytest.raises(TransientError) as caught:
        asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    verdict = from_exception(caught.value)
    assert verdict.outcome is Outcome.RETRY and verdict.retry_after_ms == 1000
    assert verdict.error is not None and verdict.error.code == "RATE_LIMITED"
    receipt = {"status": "ATTEMPT_FAILED", "instance_id": "i1", "at": 1, "error": verdict.error.model_dump()}
    call = call_of(receipt)
    assert call is not None and call.outcome is Health.OVERLOAD
    assert sender.sent == []  # nothing was sent: no delivery step


def test_failure_kinds_map_to_signals() -> None:
    permanent = signal_for(Failure(FailureKind.PERMANENT, "HTTP_404", "gone"))
    assert isinstance(permanent, BusinessError) and from_exception(permanent).outcome is Outcome.FAIL
    retryable = signal_for(Failure(FailureKind.RETRYABLE, "TIMEOUT", "slow"))
    assert isinstance(retryable, TransientError) and from_exception(retryable).outcome is Outcome.RETRY
    assert call_of({"status": "ATTEMPT_FAILED", "instance_id": "i", "at": 1,
                    "error": from_exception(retryable).error.model_dump()}).outcome is Health.FAILURE  # type: ignore


def test_the_agent_serves_the_channel_capability() -> None:
    agent = channel_agent("sms", provider=FakeProvider(Sent(provider_message_id="p")), sender=FakeSender())
    assert agent.agent_id == "agent://channels/sms" and list(agent.capabilities) == ["channel.sms"]
    spec = agent.capabilities["channel.sms"]
    assert spec.is_async and spec.wants_context
    assert list(spec.input_validator.iter_errors({"endpoint": "+1555", "body": {}, "extra": 1}))
