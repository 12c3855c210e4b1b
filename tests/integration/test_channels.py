"""Channels end to end on the real broker and Redis with real local servers: a webhook callback reaches a local
HTTP receiver signed, with the selected fields, and the trace shows SENT and DELIVERED; email through a real SMTP
server on loopback (aiosmtpd); the fake SMS provider's delivery report, and its 429s opening the instance's breaker
with the health writer running."""

from __future__ import annotations

import asyncio
import email
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from pydantic import SecretStr

from reach import control, signing
from reach.agent import Agent
from reach.channels import webhooksig
from reach.channels.agent import channel_agent
from reach.channels.closure import callback_id
from reach.channels.errors import BadCallback
from reach.channels.health import ChannelRules
from reach.channels.provider import Failure, OutboundMessage
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.channels.webhook import WebhookProvider
from reach.client import Client
from reach.core.healthmodel.settings import HealthSettings
from reach.envelopes import now_ms
from reach.names import Names
from reach.records import BreakerState, Policy, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.delays.forwarder import DelayForwarder
from reach.streams.health.writer import HealthWriter
from reach.streams.status.fold import StatusFold
from tests.integration.agent_support import Receipts, running
from tests.integration.channel_servers import FakeSms, Receiver, listening
from tests.integration.router_helpers import running_router, running_status, wait_for

pytestmark = pytest.mark.integration
SECRET = "test-webhook-secret"


def echo_agent() -> Agent:
    agent = Agent("agent://demo/echo", max_concurrency=4)

    @agent.capability("demo.echo", version="1.0.0", input_schema={"type": "object"})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


def serving(router: Any, *capabilities: str) -> bool:
    live = {c.name for r in router.state.live(now_ms()) for c in r.capabilities}
    return set(capabilities) <= live


def timeline(fold: StatusFold, message_id: str) -> list[Status]:
    row = fold.row(message_id)
    return [s.status for s in row.timeline] if row is not None else []


@contextmanager
def delays() -> Iterator[DelayForwarder]:
    """The delay tiers' forwarder in-process: retries scheduled by the SDK come back when due."""
    forwarder = DelayForwarder(names=Names(ReachSettings().namespace), tiers=["1s", "10s", "60s"],
                               kafka=KafkaSettings(), redis=RedisSettings())
    forwarder.start()
    try:
        yield forwarder
    finally:
        forwarder.stop(timeout=15)


def fast_retries(capability: str, attempts: int) -> None:
    control.publish(control.policy_record(Policy(max_attempts=attempts, backoff_base_ms=100, backoff_max_ms=300),
                                          scope=capability), names=Names(ReachSettings().namespace),
                    kafka=KafkaSettings())


def test_webhook_callback_is_signed_selects_fields_and_shows_sent_and_delivered(namespace: str,
                                                                               tmp_path: Path) -> None:
    # the receiver listens on loopback: this agent is configured for private targets (off by default)
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr(SECRET), timeout_s=2,
                                                                webhook_allow_private=True, webhook_legacy_v1=True),
                            kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                            closure=ClosureSettings())
    fast_retries("channel.webhook", 2)
    with listening(Receiver()) as receiver, running_status(tmp_path) as fold, running_router() as router, delays(), \
            running(echo_agent()), running(webhook), Client() as client:
        wait_for(lambda: serving(router, "demo.echo", "channel.webhook"), what="echo and webhook agents READY")
        with pytest.raises(BadCallback, match="not an http"):
            client.send("demo.echo", {}, callback="webhook:ftp://nope")  # refused at send time, nothing sent
        mid = client.send("demo.echo", {"text": "hi", "items": [{"id": 7}]},
                          callback=f"webhook:{receiver.url}/hook", callback_fields="$.text,$.items[0].id,$.missing")
        hit = wait_for(lambda: receiver.posts()[:1], 60, "the webhook at the receiver")[0]
        sig = signing.verify(SECRET.encode(), hit.headers["Reach-Signature"], hit.body, now=int(time.time()))
        assert isinstance(sig, signing.Signature), sig
        assert sig.nonce == callback_id(mid, 0) == hit.headers["Reach-Message-Id"]
        tenant = hit.headers["Reach-Tenant"]  # the per-tenant signature over tenant and URL (issue 28, finding 7)
        assert webhooksig.verify(webhooksig.tenant_secret(SECRET.encode(), tenant), hit.headers["Reach-Signature"],
                                 tenant=tenant, url=f"{receiver.url}/hook", body=hit.body, now=int(time.time()))
        body = json.loads(hit.body)
        assert body["message_id"] == mid and body["status"] == "COMPLETED"
        assert body["fields"] == {"$.text": "hi", "$.items[0].id": 7, "$.missing": None}
        assert body["unmatched"] == ["$.missing"]

        cb = callback_id(mid, 0)
        wait_for(lambda: {Status.SENT, Status.DELIVERED, Status.COMPLETED} <= set(timeline(fold, cb)), 30,
                 "SENT, DELIVERED and COMPLETED on the callback")
        wait_for(lambda: Status.CALLBACKED in timeline(fold, mid), 30, "CALLBACKED on the original message")
        original, callback = fold.row(mid), fold.row(cb)
        assert original is not None and callback is not None
        assert original.status is Status.COMPLETED and callback.status is Status.COMPLETED
        assert callback.trace_id == original.trace_id
        assert {m for _, m in fold.trace(original.trace_id)} == {mid, cb}
        sent = next(s for s in callback.timeline if s.status is Status.SENT)
        assert sent.channel is not None and sent.channel.channel == "webhook"
        assert sent.channel.provider_message_id == "rcv-1"  # the receiver's id from its answer

        # a permanent 4xx: FAILED with the reason, not retried; an unreachable endpoint: retried, then dead-lettered
        gone = client.send("demo.echo", {}, callback=f"webhook:{receiver.url}/gone")
        wait_for(lambda: (r := fold.row(callback_id(gone, 0))) is not None and r.status is Status.FAILED, 60,
                 "FAILED for a 404 webhook")
        failed = fold.row(callback_id(gone, 0))
        assert failed is not None and failed.last_error is not None and failed.last_error.code == "HTTP_404"
        assert "no such hook" not in failed.last_error.message  # the target's answer body is never echoed
        assert len(receiver.posts("/gone")) == 1
        # by default the provider refuses a loopback target before connecting
        default = WebhookProvider(ChannelSettings(webhook_secret=SecretStr(SECRET), timeout_s=2))
        refused = asyncio.run(default.send(OutboundMessage(endpoint=f"{receiver.url}/hook", body={}, message_id="m",
                                                           trace_id="t")))
        assert isinstance(refused, Failure) and refused.code == "FORBIDDEN_TARGET", refused
        assert len(receiver.posts()) == 1
        closed = Receiver()  # bound, never served, then closed: nothing listens on its port
        closed.httpd.server_close()
        lost = client.send("demo.echo", {}, callback=f"webhook:{closed.url}/hook")
        try:
            wait_for(lambda: (r := fold.row(callback_id(lost, 0))) is not None and r.status is Status.DEAD_LETTERED,
                     90, "DEAD_LETTERED for an unreachable webhook")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {fold.row(callback_id(lost, 0))}") from None
        row = fold.row(callback_id(lost, 0))
        assert row is not None and row.last_error is not None and row.last_error.code == "RETRIES_EXHAUSTED"
        assert "CONNECT_FAILED" in row.last_error.message
        assert [s.status for s in row.timeline].count(Status.ATTEMPT_FAILED) == 2


@contextmanager
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    """A real SMTP server (aiosmtpd) on a free loopback port."""
    inbox = Inbox()
    with socket.socket() as probe:  # aiosmtpd checks its own port on start, so it needs a real one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        yield inbox, port
    finally:
        smtp.stop()


class Inbox:
    """An aiosmtpd handler keeping every message it accepted."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append((list(envelope.rcpt_tos), bytes(envelope.original_content or envelope.content)))
        return "250 OK"


def test_email_callback_arrives_at_a_real_smtp_server(namespace: str, tmp_path: Path) -> None:
    with smtp_server() as (inbox, port):
        agent = channel_agent("email", settings=ChannelSettings(smtp_host="127.0.0.1", smtp_port=port,
                                                                smtp_from="reach@test.local", timeout_s=5),
                              kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                              closure=ClosureSettings())
        with running_status(tmp_path) as fold, running_router() as router, running(echo_agent()), running(agent), \
                Client() as client:
            wait_for(lambda: serving(router, "demo.echo", "channel.email"), what="echo and email agents READY")
            mid = client.send("demo.echo", {"answer": 42}, callback="email:ops@example.com", callback_fields="$.answer")
            recipients, raw = wait_for(lambda: inbox.messages[:1], 60, "the email at the SMTP server")[0]
            assert recipients == ["ops@example.com"]
            mail = email.message_from_bytes(raw)
            assert mail["From"] == "reach@test.local" and mail["To"] == "ops@example.com"
            assert mail["Subject"] == "Reach: demo.echo COMPLETED"
            assert mail["Message-ID"] == f"<{callback_id(mid, 0)}@reach>"
            content = json.loads(mail.get_payload(decode=True))  # type: ignore[arg-type]
            assert content["fields"] == {"$.answer": 42} and content["message_id"] == mid
            wait_for(lambda: {Status.SENT, Status.DELIVERED} <= set(timeline(fold, callback_id(mid, 0))), 30,
                     "SENT and DELIVERED for the email")
            wait_for(lambda: Status.CALLBACKED in timeline(fold, mid), 30, "CALLBACKED on the original message")


def test_sms_delivery_report_then_429s_open_the_instance_breaker(namespace: str, tmp_path: Path) -> None:
    names = Names(ReachSettings().namespace)
    with listening(FakeSms()) as provider:
        agent = channel_agent("sms", settings=ChannelSettings(sms_url=f"{provider.url}/api", sms_poll_s=0.05,
                                                              timeout_s=2), kafka=KafkaSettings(),
                              redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
        fast_retries("channel.sms", 3)
        writer = HealthWriter(names=names, kafka=KafkaSettings(), settings=HealthSettings())
        receipts = Receipts(names.receipts)
        writer.start()
        try:
            with running_router() as router, delays(), running(agent), Client() as client:
                wait_for(lambda: serving(router, "channel.sms"), what="sms agent READY")
                ok = client.send("channel.sms", {"endpoint": "+15551234567", "body": {"text": "your code is 1234"}})
                seen = receipts.wait_status([ok], Status.DELIVERED, timeout=60)[ok]
                sent = next(r for r in seen if r.status is Status.SENT)
                assert sent.channel is not None and sent.channel.provider_message_id in provider.messages
                assert provider.messages[sent.channel.provider_message_id]["text"] == "your code is 1234"
                assert any(r.status is Status.COMPLETED for r in receipts.wait_status([ok], Status.COMPLETED)[ok])

                provider.mode = "429"
                throttled = [client.send("channel.sms", {"endpoint": "+15551234567", "body": {"text": f"n{n}"}})
                             for n in range(4)]
                failed = receipts.wait_status(throttled, Status.ATTEMPT_FAILED, timeout=60)
                errors = [r.error for m in throttled for r in failed[m] if r.status is Status.ATTEMPT_FAILED]
                codes = [e.code for e in errors if e is not None]
                assert codes.count("RATE_LIMITED") >= 3, codes
                # once the instance's own channel health is OPEN it stops calling the provider (no backup named)
                assert set(codes) <= {"RATE_LIMITED", "CHANNEL_OPEN"}, codes
                instance = agent.instance_id

                def opened() -> bool:
                    record = writer.records().get(instance)
                    return record is not None and record.breaker is BreakerState.OPEN

                wait_for(opened, 30, "the sms instance's breaker OPEN")
                record = writer.records()[instance]
                assert record.reason is not None and "overload" in record.reason, record.reason
        finally:
            writer.stop()
            receipts.close()


def test_sms_429s_open_the_channel_and_callbacks_go_to_the_email_backup_until_probes_bring_it_back(
        namespace: str, tmp_path: Path) -> None:
    rules = ChannelRules(open_ms=2_000, probe_every_ms=200, probes=3)
    with listening(FakeSms()) as provider, smtp_server() as (inbox, port):
        sms = channel_agent("sms", settings=ChannelSettings(sms_url=f"{provider.url}/api", sms_poll_s=0.05,
                                                            timeout_s=2), health=rules, kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
        mail = channel_agent("email", settings=ChannelSettings(smtp_host="127.0.0.1", smtp_port=port, timeout_s=5),
                             kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                             closure=ClosureSettings())
        fast_retries("channel.sms", 3)
        spec = json.dumps({"channel": "sms", "endpoint": "+15551234567", "fields": ["$.n"],
                           "backup": {"channel": "email", "endpoint": "ops@example.com"}})
        with running_status(tmp_path) as fold, running_router() as router, delays(), running(echo_agent()), \
                running(sms), running(mail), Client() as client:
            wait_for(lambda: serving(router, "demo.echo", "channel.sms", "channel.email"), what="agents READY")
            provider.mode = "429"
            sent = [client.send("demo.echo", {"n": n}, callback=spec) for n in range(6)]

            def by_mail() -> set[int]:
                return {json.loads(email.message_from_bytes(raw).get_payload(decode=True))["fields"]["$.n"]
                        for _, raw in list(inbox.messages)}

            wait_for(lambda: by_mail() == set(range(6)), 90, "every callback delivered by the email backup")
            wait_for(lambda: all(Status.CALLBACKED in timeline(fold, m) for m in sent), 30, "CALLBACKED on all six")
            assert provider.messages == {}  # the SMS provider accepted none of them
            handed = fold.row(callback_id(sent[0], 0))
            assert handed is not None and handed.status is Status.COMPLETED
            assert {m for _, m in fold.trace(handed.trace_id)} == {sent[0], callback_id(sent[0], 0),
                                                                   callback_id(sent[0], 0) + "-bk"}

            provider.mode = "ok"  # the provider recovers: after OPEN, real sends probe it back

            def via_sms() -> bool:
                mid = client.send("demo.echo", {"n": 99}, callback=spec)
                return wait_for(lambda: (r := fold.row(callback_id(mid, 0))) is not None and r.terminal, 30,
                                "the callback's outcome") and Status.SENT in timeline(fold, callback_id(mid, 0))

            wait_for(via_sms, 60, "a callback sent by SMS again", interval=0.5)
            assert provider.messages


class Throttling(Receiver):
    """A tenant's own receiver that answers every webhook 429 (the issue-28 attack on everyone's webhooks)."""

    def answer(self, hit: Any) -> tuple[int, dict[str, Any]]:
        return 429, {"error": "slow down"}


def test_one_tenants_429ing_receiver_neither_opens_webhooks_for_another_tenant_nor_the_instance_breaker(
        namespace: str, tmp_path: Path) -> None:
    names = Names(ReachSettings().namespace)
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr(SECRET), timeout_s=2,
                                                                webhook_allow_private=True),
                            kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                            closure=ClosureSettings())
    fast_retries("channel.webhook", 3)
    writer = HealthWriter(names=names, kafka=KafkaSettings(), settings=HealthSettings())
    receipts = Receipts(names.receipts)
    writer.start()
    try:
        with listening(Throttling()) as evil, listening(Receiver()) as good, running_router() as router, delays(), \
                running(webhook), Client() as client:
            wait_for(lambda: serving(router, "channel.webhook"), what="webhook agent READY")
            storm = [client.send("channel.webhook", {"endpoint": f"{evil.url}/hook", "body": {"n": n}},
                                 tenant="mallory") for n in range(5)]
            failed = receipts.wait_status(storm, Status.ATTEMPT_FAILED, timeout=60)
            errors = [r.error for m in storm for r in failed[m] if r.status is Status.ATTEMPT_FAILED and r.error]
            assert {e.code for e in errors} <= {"RATE_LIMITED", "CHANNEL_OPEN"}, [(e.kind, e.code) for e in errors]
            late = client.send("channel.webhook", {"endpoint": f"{evil.url}/hook", "body": {}}, tenant="mallory")
            errors += [r.error for r in receipts.wait_status([late], Status.ATTEMPT_FAILED, timeout=30)[late]
                       if r.status is Status.ATTEMPT_FAILED and r.error]
            assert errors[-1].code == "CHANNEL_OPEN", errors[-1]  # mallory -> its receiver is OPEN on the instance
            assert {e.kind for e in errors} == {"DESTINATION"}  # the receiver's fault, not the instance's
            # another tenant's webhook, sent while mallory's destination is OPEN on this instance, is delivered
            ok = client.send("channel.webhook", {"endpoint": f"{good.url}/hook", "body": {"hi": 1}}, tenant="acme")
            assert any(r.status is Status.DELIVERED for r in receipts.wait_status([ok], Status.DELIVERED,
                                                                                   timeout=30)[ok])
            assert good.posts() and good.posts()[0].headers["Reach-Tenant"] == "acme"
            instance = webhook.instance_id
            # the health writer folded the storm's calls, and the instance's breaker stayed CLOSED
            record = wait_for(lambda: (r := writer.records().get(instance)) is not None and r.calls_1m >= 6 and r,
                              30, "the webhook instance's health folded")
            assert record.breaker is BreakerState.CLOSED and record.overloads_10s == 0, record
    finally:
        writer.stop()
        receipts.close()
