"""Channel health per tenant and destination: one tenant's failing webhook receiver never opens the channel for
other tenants or hosts, and its failures never count against the instance in routing (issue 28, finding 1)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach.agent import Context, TransientError
from reach.agent.outcomes import from_exception
from reach.channels.agent import ChannelService
from reach.channels.catalog import channel
from reach.channels.health import ChannelRules, ChannelState, Destinations
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent
from reach.channels.settings import ClosureSettings
from reach.channels.steps import DeliverySteps
from reach.core.breaker import Outcome as Health
from reach.core.healthmodel.calls import call_of
from reach.envelopes import new_envelope
from reach.names import Names
from tests.unit.agent.fakes import FakeSender

EVIL = "https://evil.example/hook"
GOOD = "https://good.example/hook"


class HostProvider:
    """Answers 429 for evil.example, delivers anywhere else."""

    channel = "webhook"

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []

    async def send(self, message: OutboundMessage) -> SendOutcome:
        self.sent.append(message)
        if "evil.example" in message.endpoint:
            return Failure(FailureKind.RATE_LIMITED, "RATE_LIMITED", "the provider answered 429 Too Many Requests")
        return Sent(provider_message_id=f"p-{len(self.sent)}", delivered=True)

    async def delivered(self, sent: Sent) -> bool:
        return sent.delivered

    async def aclose(self) -> None:
        return None


def send(svc: ChannelService, tenant: str, endpoint: str) -> dict[str, Any]:
    env = new_envelope("channel.webhook", {"endpoint": endpoint, "body": {}}, tenant=tenant)
    ctx = Context(envelope=env, agent_id="agent://channels/webhook", instance_id="i1")
    return asyncio.run(svc.handle({"endpoint": endpoint, "body": {}}, ctx))


def webhook_service(provider: HostProvider) -> ChannelService:
    steps = DeliverySteps(FakeSender(), names=Names("ns"), agent_id="agent://channels/webhook", instance_id="i1")
    return ChannelService(channel("webhook"), provider, steps, closure=ClosureSettings())


def test_a_tenants_429ing_receiver_opens_only_that_tenants_sends_to_that_host() -> None:
    provider = HostProvider()
    svc = webhook_service(provider)
    for _ in range(3):  # the attack: three 429s within 10 s
        with pytest.raises(TransientError):
            send(svc, "mallory", EVIL)
    with pytest.raises(TransientError) as caught:
        send(svc, "mallory", EVIL)
    assert caught.value.code == "CHANNEL_OPEN" and len(provider.sent) == 3  # mallory -> evil is OPEN
    assert "provider_message_id" in send(svc, "acme", GOOD)  # another tenant: delivered
    assert "provider_message_id" in send(svc, "mallory", GOOD)  # the same tenant, another host: delivered
    with pytest.raises(TransientError) as other:
        send(svc, "acme", EVIL)  # another tenant to the same host is still tried (and fails on its own account)
    assert other.value.code == "RATE_LIMITED" and len(provider.sent) == 6
    assert svc.destinations.open(svc.clock()) == ["mallory/evil.example:443"]
    assert svc.health.state(svc.clock()) is ChannelState.OPEN  # the board row shows the worst destination


def test_a_receivers_failures_and_open_state_do_not_count_against_the_instance_in_routing() -> None:
    svc = webhook_service(HostProvider())
    failures = []
    for _ in range(4):
        with pytest.raises(TransientError) as caught:
            send(svc, "mallory", EVIL)
        failures.append(caught.value)
    assert [f.code for f in failures] == ["RATE_LIMITED"] * 3 + ["CHANNEL_OPEN"]
    for failure in failures:
        verdict = from_exception(failure)
        assert verdict.error is not None and verdict.error.kind == "DESTINATION"
        call = call_of({"status": "ATTEMPT_FAILED", "instance_id": "i1", "at": 1, "error": verdict.error.model_dump()})
        assert call is not None and call.outcome is Health.SUCCESS  # not OVERLOAD: no instance breaker opens


def test_destinations_forget_the_least_recently_used_beyond_capacity() -> None:
    book = Destinations(ChannelRules(), capacity=2)
    first = book.of("t", "a:443")
    book.of("t", "b:443")
    assert book.of("t", "a:443") is first  # used again: kept
    book.of("t", "c:443")  # b is the least recently used: forgotten
    assert book.of("t", "a:443") is first and book.of("t", "b:443") is not None
    assert len(book.open(0)) == 0
