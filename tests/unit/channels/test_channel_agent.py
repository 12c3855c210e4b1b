"""The channel handler with a fake provider and sender: delivery steps, CALLBACKED, and failures as signals."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import SecretStr

from reach.agent import BusinessError, Context, Reject, TransientError
from reach.agent.outcomes import Outcome, from_exception
from reach.channels.agent import ChannelService, channel_agent, signal_for
from reach.channels.catalog import channel
from reach.channels.errors import ChannelMisconfigured
from reach.channels.health import ChannelState
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.channels.steps import DeliverySteps
from reach.channels.tokens import CALLBACKS_PATH, read
from reach.core.breaker import Outcome as Health
from reach.core.healthmodel.calls import call_of
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.kafka.codec import decode_dict, encode
from reach.names import Names
from reach.records import Envelope, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
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
    steps = DeliverySteps(sender, names=Names("ns"), agent_id="agent://channels/sms", instance_id="i1")
    return ChannelService(channel("sms"), provider, steps, closure=ClosureSettings()), sender


def _settings(*, closure: ClosureSettings) -> dict[str, Any]:
    """What `reach channels run` passes a channel agent (its provider comes from the test)."""
    return {"settings": ChannelSettings(), "kafka": KafkaSettings(), "redis": RedisSettings(), "reach": ReachSettings(),
            "closure": closure}


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
    agent = channel_agent("sms", provider=FakeProvider(Sent(provider_message_id="p")), sender=FakeSender(),
                          **_settings(closure=ClosureSettings()))
    assert agent.agent_id == "agent://channels/sms" and list(agent.capabilities) == ["channel.sms"]
    spec = agent.capabilities["channel.sms"]
    assert spec.is_async and spec.wants_context
    assert list(spec.input_validator.iter_errors({"endpoint": "+1555", "body": {}, "extra": 1}))


def test_while_open_a_request_with_a_backup_is_handed_over_and_the_backup_closes_the_callback() -> None:
    provider = FakeProvider(Failure(FailureKind.RATE_LIMITED, "RATE_LIMITED", "429"))
    svc, sender = service(provider)
    payload = {**json.loads(callback_envelope().payload), "backup": {"channel": "email", "endpoint": "ops@example.com"}}
    env = callback_envelope()
    for _ in range(2):  # two 429s: not OPEN yet, retried as usual
        with pytest.raises(TransientError):
            asyncio.run(svc.handle(payload, ctx(env)))
    result = asyncio.run(svc.handle(payload, ctx(env)))  # the third 429 opens it: handed over
    assert result == {"channel": "sms", "handed_over_to": "email", "message_id": "orig-cb0-bk"}
    asyncio.run(svc.handle(payload, ctx(env)))  # while OPEN the provider is not called at all
    assert len(provider.sent) == 3
    [backup, again] = [codec.decode(r.value or b"", Envelope) for r in sender.on("ns.cap.channel.email")]
    assert backup == again.model_copy(update={"created_at": backup.created_at, "deadline": backup.deadline})
    assert (backup.capability, backup.trace_id, backup.parent_id) == ("channel.email", "t1", "orig-cb0")
    forwarded = json.loads(backup.payload)
    assert forwarded["endpoint"] == "ops@example.com" and forwarded["handed_over_from"] == "orig-cb0"
    assert "backup" not in forwarded  # the backup has no backup of its own

    mail = FakeProvider(Sent(provider_message_id="<orig-cb0-bk@reach>", delivered=True))
    mail.channel = "email"
    email_sender = FakeSender()
    email_svc = ChannelService(channel("email"), mail, DeliverySteps(email_sender, names=Names("ns"),
                                                                     agent_id="agent://channels/email",
                                                                     instance_id="i2"),
                               closure=ClosureSettings())
    asyncio.run(email_svc.handle(forwarded, Context(envelope=backup, agent_id="agent://channels/email",
                                                    instance_id="i2")))
    assert [(r.message_id, r.status) for r in email_sender.receipts()] == [
        ("orig-cb0-bk", Status.SENT), ("orig-cb0-bk", Status.DELIVERED), ("orig", Status.CALLBACKED)]


def test_while_open_without_a_backup_the_send_fails_retryably() -> None:
    provider = FakeProvider(Failure(FailureKind.RATE_LIMITED, "RATE_LIMITED", "429"))
    svc, _ = service(provider)
    env = callback_envelope()
    for _ in range(3):
        with pytest.raises(TransientError):
            asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    with pytest.raises(TransientError) as caught:
        asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    assert caught.value.code == "CHANNEL_OPEN" and len(provider.sent) == 3
    # an OVERLOAD-class failure for the health writer: three open the instance breaker, so routing skips it
    verdict = from_exception(caught.value)
    assert verdict.error is not None
    receipt = {"status": "ATTEMPT_FAILED", "instance_id": "i1", "at": 1, "error": verdict.error.model_dump()}
    call = call_of(receipt)
    assert call is not None and call.outcome is Health.OVERLOAD


def test_a_bad_backup_is_rejected() -> None:
    svc, _ = service(FakeProvider(Sent(provider_message_id="p")))
    env = callback_envelope()
    with pytest.raises(Reject, match="another channel"):
        asyncio.run(svc.handle({**json.loads(env.payload), "backup": {"channel": "sms", "endpoint": "+15550000000"}},
                               ctx(env)))


def test_when_the_provider_recovers_real_sends_probe_it_back_to_healthy() -> None:
    from reach.channels.health import ChannelHealth, ChannelRules, ChannelState

    clock = [0]
    provider = FakeProvider(Failure(FailureKind.RATE_LIMITED, "RATE_LIMITED", "429"))
    rules = ChannelRules(open_ms=1_000, probe_every_ms=100, probes=3)
    svc = ChannelService(channel("sms"), provider, DeliverySteps(FakeSender(), names=Names("ns"), agent_id="a",
                                                                 instance_id="i1"),
                         health=ChannelHealth(rules), clock=lambda: clock[0], closure=ClosureSettings())
    env = callback_envelope()
    payload = {**json.loads(env.payload), "backup": {"channel": "email", "endpoint": "ops@example.com"}}
    for _ in range(3):
        try:
            asyncio.run(svc.handle(payload, ctx(env)))
        except TransientError:
            pass
    assert svc.health.state(clock[0]) is ChannelState.OPEN
    provider.outcome = Sent(provider_message_id="p-ok", delivered=True)
    clock[0] = 500
    assert "handed_over_to" in asyncio.run(svc.handle(payload, ctx(env)))  # still OPEN: no probe yet
    sent_before = len(provider.sent)
    for at in (1_100, 1_150, 1_200, 1_300):  # probes every 100 ms: 1_150 is not one and is handed over
        clock[0] = at
        asyncio.run(svc.handle(payload, ctx(env)))
    assert len(provider.sent) - sent_before == 3
    assert svc.health.state(1_301) is ChannelState.HEALTHY
    assert asyncio.run(svc.handle(payload, ctx(env)))["provider_message_id"] == "p-ok"


def test_with_replies_on_each_send_carries_a_reply_url_whose_token_names_the_message() -> None:
    provider = FakeProvider(Sent(provider_message_id="p-2"))
    steps = DeliverySteps(FakeSender(), names=Names("ns"), agent_id="agent://channels/sms", instance_id="i1")
    closure = ClosureSettings(secret=SecretStr("k"), base_url="https://gw.example")
    svc = ChannelService(channel("sms"), provider, steps, closure=closure, clock=lambda: 1_000)
    env = callback_envelope()
    asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    (sent,) = provider.sent
    assert sent.reply_url.startswith("https://gw.example" + CALLBACKS_PATH)
    assert sent.body["reply_to"] == sent.reply_url and sent.body["text"] == "hi"
    claims = read(b"k", sent.reply_url.rsplit("/", 1)[1], now=1_001)
    assert (claims.message_id, claims.trace_id, claims.capability) == ("orig-cb0", "t1", "demo.echo")
    assert claims.expires_at == 1_000 + closure.ttl_s * 1000
    assert (svc.counts.delivered, svc.counts.reply_urls, svc.counts.callbacked) == (1, 1, 1)


def test_without_a_secret_no_reply_url() -> None:
    provider = FakeProvider(Sent(provider_message_id="p-3"))
    svc, _ = service(provider)
    env = callback_envelope()
    asyncio.run(svc.handle(json.loads(env.payload), ctx(env)))
    assert provider.sent[0].reply_url == "" and "reply_to" not in provider.sent[0].body


def test_replies_half_configured_refuse_to_start() -> None:
    with pytest.raises(ChannelMisconfigured, match="REACH_CALLBACK_BASE_URL"):
        channel_agent("sms", provider=FakeProvider(Sent(provider_message_id="p")),
                      **_settings(closure=ClosureSettings(secret=SecretStr("k"))))
    with pytest.raises(ValueError, match="not an http"):
        ClosureSettings(secret=SecretStr("k"), base_url="gw.example")


def test_only_the_status_folds_question_makes_a_reply_an_answer() -> None:
    # review finding: a caller's own channel request naming `answer_for` minted a token that answered any message
    # of its tenant; only a question the status fold sends (its source) may
    closure = ClosureSettings(secret=SecretStr("k"), base_url="https://gw.example")
    svc = ChannelService(channel("sms"), FakeProvider(Sent(provider_message_id="p")), None, closure=closure,
                         clock=lambda: 1_000)
    payload = {"to": "+15550100", "text": "hi", "answer_for": {"message_id": "victim", "generation": 0}}
    forged = callback_envelope().model_copy(update={"source": "gateway:app_1"})
    question = callback_envelope().model_copy(update={"source": "reach-status-fold"})
    answers = [read(b"k", svc.reply_url(env, payload).rsplit("/", 1)[1], now=1_001).answers
               for env in (forged, question)]
    assert answers == [None, "victim"]


def test_sends_reported_later_at_the_gateway_never_count_as_missing_reports() -> None:
    """REACH_CHANNEL_SMS_REPORTS=webhook: the instance never sees the report, so its arrival signal must not grade
    those sends (else 10 sends without a report at the instance would open the channel)."""
    now = [0]
    svc, _ = service(FakeProvider(Sent(provider_message_id="p", reported_later=True), confirms=False))
    svc.clock = lambda: now[0]
    polled, _ = service(FakeProvider(Sent(provider_message_id="p"), confirms=False))
    polled.clock = lambda: now[0]
    for n in range(12):
        for one in (svc, polled):
            env = callback_envelope().model_copy(update={"message_id": f"m{n}-cb0"})
            asyncio.run(one.handle(json.loads(env.payload), ctx(env)))
    now[0] = 20_000  # past the report grace
    assert svc.health.signals(now[0])[2] is None  # nothing expected, nothing graded
    assert svc.health.state(now[0]) is ChannelState.HEALTHY
    assert polled.health.state(now[0]) is ChannelState.OPEN  # expected, never arrived: what webhook mode avoids


class ProbedProvider(FakeProvider):
    """A provider with an idle probe whose answer the test sets."""

    def __init__(self) -> None:
        super().__init__(Sent(provider_message_id="p-1"))
        self.down: Failure | None = None
        self.probes = 0

    async def probe(self) -> Failure | None:
        self.probes += 1
        return self.down


def test_an_idle_provider_is_probed_and_opens_for_every_tenant_when_it_is_down() -> None:
    from reach.channels.health import ChannelRules

    provider = ProbedProvider()
    now = [0]
    svc = ChannelService(channel("sms"), provider, health=ChannelRules(idle_probe_every_ms=1_000),
                         clock=lambda: now[0], closure=ClosureSettings())
    assert asyncio.run(svc.idle_probe()) == 1  # nobody sent yet: the `*` entry stands for every tenant
    assert provider.probes == 1 and svc.health.state(0) is ChannelState.HEALTHY
    assert asyncio.run(svc.idle_probe()) == 0 and provider.probes == 1  # probed within the idle period: not again
    provider.down = Failure(FailureKind.RETRYABLE, "SMS_DOWN", "connection refused")
    for now[0] in (1_000, 2_000):
        asyncio.run(svc.idle_probe())
    assert svc.destinations.open(2_000) == ["*/"]
    assert "2 idle probes failed: connection refused" in (svc.health.breaker.reason or "")


def test_a_channel_whose_caller_chooses_the_destination_is_never_probed_idle() -> None:
    provider = ProbedProvider()
    provider.channel = "webhook"
    svc = ChannelService(channel("webhook"), provider, closure=ClosureSettings())
    assert asyncio.run(svc.idle_probe()) == 0 and provider.probes == 0
