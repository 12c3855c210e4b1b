"""Provider adapters against in-memory HTTP transports and SMTP errors: what each answer is classified as."""

from __future__ import annotations

import asyncio
import json
import smtplib

import httpx
import pytest
from pydantic import SecretStr

from reach import signing
from reach.channels.errors import ChannelMisconfigured
from reach.channels.guard import Resolver, pinned, refused_address
from reach.channels.provider import Failure, FailureKind, OutboundMessage, Sent, classify_status
from reach.channels.settings import ChannelSettings
from reach.channels.sms import SmsProvider, text_of
from reach.channels.smtp import classify_smtp, compose
from reach.channels.webhook import SIGNATURE_HEADER, WebhookProvider, body_bytes

MESSAGE = OutboundMessage(endpoint="https://receiver.test/hook", body={"status": "COMPLETED", "fields": {"$.a": 1}},
                          message_id="01JCALLBACKMESSAGE0000000-cb0", trace_id="t1", subject="done")
SETTINGS = ChannelSettings(webhook_secret=SecretStr("s3cret"), sms_url="https://sms.test/api",
                           sms_token=SecretStr("tok"), sms_delivery_wait_s=0.5, sms_poll_s=0.01)


@pytest.mark.parametrize(("status", "kind", "code"), [
    (429, FailureKind.RATE_LIMITED, "RATE_LIMITED"),
    (500, FailureKind.RETRYABLE, "HTTP_500"),
    (503, FailureKind.RETRYABLE, "HTTP_503"),
    (408, FailureKind.RETRYABLE, "HTTP_408"),
    (400, FailureKind.PERMANENT, "HTTP_400"),
    (404, FailureKind.PERMANENT, "HTTP_404"),
    (401, FailureKind.PERMANENT, "HTTP_401"),
])
def test_http_status_classification(status: int, kind: FailureKind, code: str) -> None:
    failure = classify_status(status, retry_after="2")
    assert failure is not None and (failure.kind, failure.code) == (kind, code)
    assert str(status) in failure.reason
    assert classify_status(204) is None


def test_retry_after_is_read_in_seconds_and_nonsense_ignored() -> None:
    assert classify_status(429, retry_after="3").retry_after_s == 3.0  # type: ignore[union-attr]
    assert classify_status(429, retry_after="Wed, 21 Oct 2015").retry_after_s is None  # type: ignore[union-attr]
    assert classify_status(429, retry_after="99999").retry_after_s is None  # type: ignore[union-attr]


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_webhook_posts_the_signed_body_and_a_2xx_is_delivery() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"id": "rcv-7"})

    legacy = SETTINGS.model_copy(update={"webhook_legacy_v1": True})  # the one-secret `v1=` (one release more)
    provider = webhook(transport=httpx.MockTransport(answer), settings=legacy)
    outcome = _run(provider.send(MESSAGE))
    assert outcome == Sent(provider_message_id="rcv-7", delivered=True)
    request = seen[0]
    assert request.content == body_bytes(MESSAGE) and json.loads(request.content) == MESSAGE.body
    sig = signing.verify(b"s3cret", request.headers[SIGNATURE_HEADER], request.content,
                         now=int(__import__("time").time()))
    assert isinstance(sig, signing.Signature) and sig.nonce == MESSAGE.message_id
    assert not isinstance(signing.verify(b"wrong", request.headers[SIGNATURE_HEADER], request.content,
                                         now=sig.timestamp), signing.Signature)


def test_webhook_without_an_answer_id_uses_the_message_id() -> None:
    provider = webhook(transport=httpx.MockTransport(lambda _r: httpx.Response(200, text="ok")))
    assert _run(provider.send(MESSAGE)) == Sent(provider_message_id=MESSAGE.message_id, delivered=True)


def test_webhook_refusals_and_transport_failures_are_values() -> None:
    def refused(_r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    def slow(_r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out")

    outcomes = [_run(webhook(transport=httpx.MockTransport(t)).send(MESSAGE)) for t in (
        refused, slow, lambda _r: httpx.Response(429), lambda _r: httpx.Response(410, text="gone"))]
    assert [(o.kind, o.code) for o in outcomes if isinstance(o, Failure)] == [
        (FailureKind.RETRYABLE, "CONNECT_FAILED"), (FailureKind.RETRYABLE, "TIMEOUT"),
        (FailureKind.RATE_LIMITED, "RATE_LIMITED"), (FailureKind.PERMANENT, "HTTP_410")]


def test_webhook_refuses_to_start_without_a_secret() -> None:
    with pytest.raises(ChannelMisconfigured, match="REACH_CHANNEL_WEBHOOK_SECRET"):
        WebhookProvider(ChannelSettings())


class FakeSmsApi:
    """The generic SMS API in memory: answers `queue` for sends, then `delivered` after `polls` polls."""

    def __init__(self, *, send_status: int = 200, polls: int = 2) -> None:
        self.send_status = send_status
        self.polls = polls
        self.sent: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer tok"
        if request.method == "POST":
            if self.send_status != 200:
                return httpx.Response(self.send_status)
            self.sent.append(json.loads(request.content))
            return httpx.Response(200, json={"id": f"sms-{len(self.sent)}", "status": "queued"})
        self.polls -= 1
        return httpx.Response(200, json={"status": "delivered" if self.polls <= 0 else "queued"})


def test_sms_is_sent_then_delivered_by_polling_the_report() -> None:
    api = FakeSmsApi(polls=2)
    provider = SmsProvider(SETTINGS, transport=httpx.MockTransport(api))
    message = OutboundMessage(endpoint="+15551234567", body={"text": "your order shipped"}, message_id="m",
                              trace_id="t")
    sent = _run(provider.send(message))
    assert sent == Sent(provider_message_id="sms-1", delivered=False)
    assert api.sent == [{"to": "+15551234567", "from": "Reach", "text": "your order shipped", "reference": "m"}]
    assert _run(provider.delivered(sent)) is True


def test_sms_without_a_report_in_time_is_only_sent() -> None:
    provider = SmsProvider(SETTINGS, transport=httpx.MockTransport(FakeSmsApi(polls=10_000)))
    assert _run(provider.delivered(Sent(provider_message_id="x"))) is False


def test_sms_429_is_rate_limited() -> None:
    provider = SmsProvider(SETTINGS, transport=httpx.MockTransport(FakeSmsApi(send_status=429)))
    outcome = _run(provider.send(MESSAGE))
    assert isinstance(outcome, Failure) and outcome.kind is FailureKind.RATE_LIMITED


def test_sms_text_is_the_text_field_or_the_json_body_cut_to_size() -> None:
    assert text_of({"text": "hi"}) == "hi"
    assert text_of({"b": 1, "a": 2}) == '{"a":2,"b":1}'
    assert len(text_of({"text": "x" * 5000})) == 1600


def test_sms_refuses_to_start_without_a_url() -> None:
    with pytest.raises(ChannelMisconfigured, match="REACH_CHANNEL_SMS_URL"):
        SmsProvider(ChannelSettings())


@pytest.mark.parametrize(("error", "kind", "code"), [
    (smtplib.SMTPRecipientsRefused({"a@b.c": (550, b"no such user")}), FailureKind.PERMANENT, "SMTP_550"),
    (smtplib.SMTPRecipientsRefused({"a@b.c": (451, b"try later")}), FailureKind.RETRYABLE, "SMTP_451"),
    (smtplib.SMTPAuthenticationError(535, b"bad credentials"), FailureKind.PERMANENT, "SMTP_AUTH_FAILED"),
    (smtplib.SMTPDataError(554, b"rejected"), FailureKind.PERMANENT, "SMTP_554"),
    (smtplib.SMTPServerDisconnected("gone"), FailureKind.RETRYABLE, "SMTP_UNAVAILABLE"),
    (ConnectionRefusedError(111, "refused"), FailureKind.RETRYABLE, "SMTP_UNAVAILABLE"),
])
def test_smtp_classification(error: Exception, kind: FailureKind, code: str) -> None:
    failure = classify_smtp(error)
    assert (failure.kind, failure.code) == (kind, code)


def test_the_email_carries_the_body_and_a_stable_message_id() -> None:
    mail = compose(MESSAGE, "reach@localhost")
    assert mail["Message-ID"] == f"<{MESSAGE.message_id}@reach>" and mail["Subject"] == "done"
    assert json.loads(mail.get_content()) == MESSAGE.body


async def public(host: str, port: int) -> list[str]:
    return ["93.184.215.14"]  # what the test's receiver.test resolves to: a public address


def webhook(*, transport: httpx.AsyncBaseTransport, resolver: Resolver = public,
            settings: ChannelSettings = SETTINGS) -> WebhookProvider:
    return WebhookProvider(settings, transport=transport, resolver=resolver)


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "192.168.0.9", "172.16.5.5", "169.254.169.254",
                                     "100.100.100.200", "fd00:ec2::254", "::1", "::ffff:127.0.0.1", "fe80::1%eth0",
                                     "224.0.0.1", "0.0.0.0", "100.64.0.1", "240.0.0.1",
                                     # IPv6 forms embedding a private IPv4 (issue 28, finding 9)
                                     "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::c0a8:1", "64:ff9b:1::a00:1",
                                     "2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:a00:1::", "::127.0.0.1",
                                     "::10.0.0.1", "::ffff:169.254.169.254",
                                     "2001:0:4136:e378:8000:63bf:80ff:fffe"])
def test_webhook_to_a_non_public_address_is_a_permanent_failure_and_nothing_is_posted(address: str) -> None:
    posted: list[httpx.Request] = []

    async def resolves(host: str, port: int) -> list[str]:
        return ["93.184.215.14", address]  # one bad address among good ones is enough to refuse

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(request)
        return httpx.Response(200)

    outcome = _run(webhook(transport=httpx.MockTransport(answer), resolver=resolves).send(MESSAGE))
    assert isinstance(outcome, Failure) and (outcome.kind, outcome.code) == (FailureKind.PERMANENT, "FORBIDDEN_TARGET")
    assert address in outcome.reason and "REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE" in outcome.reason
    assert posted == [] and refused_address(address) is not None
    assert refused_address("93.184.215.14") is None and refused_address("2606:4700::1111") is None


def test_allow_private_posts_to_loopback_and_an_unresolvable_host_is_retried() -> None:
    async def loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    async def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    ok = httpx.MockTransport(lambda _r: httpx.Response(200))
    allowed = SETTINGS.model_copy(update={"webhook_allow_private": True})
    assert isinstance(_run(webhook(transport=ok, resolver=loopback, settings=allowed).send(MESSAGE)), Sent)
    failed = _run(webhook(transport=ok, resolver=nxdomain).send(MESSAGE))
    assert isinstance(failed, Failure) and (failed.kind, failed.code) == (FailureKind.RETRYABLE, "CONNECT_FAILED")


def test_a_refusing_target_s_answer_body_is_never_echoed_into_the_failure() -> None:
    secret = "internal-admin-token-42"
    outcome = _run(webhook(transport=httpx.MockTransport(lambda _r: httpx.Response(403, text=secret))).send(MESSAGE))
    assert isinstance(outcome, Failure) and outcome.code == "HTTP_403" and secret not in outcome.reason


def test_the_webhook_connects_to_the_checked_address_with_the_host_header_and_sni_kept() -> None:
    """DNS rebinding: the host is resolved once; the connection goes to that checked address, never to a second
    lookup's answer, while Host and TLS SNI still name the endpoint's host."""
    posted: list[httpx.Request] = []
    lookups: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)  # a second lookup would answer 127.0.0.1
        return ["93.184.215.14"] if len(lookups) == 1 else ["127.0.0.1"]

    def answer(request: httpx.Request) -> httpx.Response:
        posted.append(request)
        return httpx.Response(200)

    outcome = _run(webhook(transport=httpx.MockTransport(answer), resolver=rebinding).send(MESSAGE))
    assert isinstance(outcome, Sent) and lookups == ["receiver.test"]
    (request,) = posted
    assert (request.url.host, request.url.path) == ("93.184.215.14", "/hook")
    assert request.headers["Host"] == "receiver.test"
    assert request.extensions["sni_hostname"] == "receiver.test"


@pytest.mark.parametrize(("endpoint", "address", "url", "sni"), [
    ("https://h.test:8443/a?b=1", "2606:4700::1111", "https://[2606:4700::1111]:8443/a?b=1",
     {"sni_hostname": "h.test"}),
    ("http://h.test/x", "93.184.215.14", "http://93.184.215.14/x", {}),
    ("http://h.test/x", None, "http://h.test/x", {}),
    ("https://user:p%40ss@h.test:8443/x", "93.184.215.14", "https://user:p%40ss@93.184.215.14:8443/x",
     {"sni_hostname": "h.test"}),  # the endpoint's credentials stay (Basic auth)
])
def test_pinned_urls(endpoint: str, address: str | None, url: str, sni: dict[str, str]) -> None:
    assert pinned(endpoint, address) == (url, sni)


def test_a_reply_url_travels_with_each_channel() -> None:
    reply = "https://gw.example/v1/callbacks/tok.en"
    message = OutboundMessage(endpoint="+15551234567", body={"text": "ok?", "reply_to": reply}, message_id="m",
                              trace_id="t", reply_url=reply)
    api = FakeSmsApi()
    _run(SmsProvider(SETTINGS, transport=httpx.MockTransport(api)).send(message))
    assert api.sent[0]["reply_url"] == reply and api.sent[0]["text"] == "ok?"
    posted: list[httpx.Request] = []
    hook = webhook(transport=httpx.MockTransport(lambda r: posted.append(r) or httpx.Response(200)))
    _run(hook.send(OutboundMessage(endpoint="https://receiver.test/hook", body={"reply_to": reply}, message_id="m",
                                   trace_id="t", reply_url=reply)))
    assert posted[0].headers["Reach-Reply-To"] == reply and json.loads(posted[0].content)["reply_to"] == reply
    assert compose(message, "reach@localhost")["Reach-Reply-To"] == reply


def test_ipv6_forms_embedding_a_public_ipv4_stay_allowed() -> None:
    for address in ("64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8"):
        assert refused_address(address) is None, address
    assert "169.254.169.254" in (refused_address("64:ff9b::a9fe:a9fe") or "")  # the reason names the IPv4 inside


def test_webhook_credentials_never_reach_a_failure_text() -> None:
    message = OutboundMessage(endpoint="https://alice:hunter2@receiver.test/hook?api_key=k3y&x=1", body={},
                              message_id="01JCALLBACKMESSAGE0000000-cb0", trace_id="t1")

    def refuse(_request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused to https://alice:hunter2@receiver.test/hook")

    def slow(_request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out")

    for transport in (refuse, slow):
        outcome = _run(webhook(transport=httpx.MockTransport(transport)).send(message))
        assert isinstance(outcome, Failure), outcome
        assert "hunter2" not in outcome.reason and "k3y" not in outcome.reason, outcome.reason
        assert "https://***@receiver.test/hook" in outcome.reason and "api_key=***" in outcome.reason


def test_webhooks_are_signed_per_tenant_over_tenant_url_and_body_with_both_secrets_during_a_rotation() -> None:
    from reach.channels import webhooksig

    seen: list[httpx.Request] = []
    rotating = SETTINGS.model_copy(update={"webhook_secret": SecretStr("new"),
                                           "webhook_previous_secret": SecretStr("old")})
    provider = webhook(transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200)),
                       settings=rotating)
    message = OutboundMessage(endpoint="https://bob:pw@receiver.test/hook?x=1", body={"a": 1},
                              message_id="01JCALLBACKMESSAGE0000000-cb0", trace_id="t1", tenant="acme")
    assert isinstance(_run(provider.send(message)), Sent)
    request = seen[0]
    header, body, now = request.headers[SIGNATURE_HEADER], request.content, int(__import__("time").time())
    url = "https://receiver.test/hook?x=1"  # what the receiver sees: no credentials
    assert request.headers[webhooksig.TENANT_HEADER] == "acme"
    for operator_secret in (b"new", b"old"):  # a receiver holding either tenant secret verifies
        mine = webhooksig.tenant_secret(operator_secret, "acme")
        assert webhooksig.verify(mine, header, tenant="acme", url=url, body=body, now=now)
        assert not webhooksig.verify(mine, header, tenant="acme", url="https://elsewhere.test/hook?x=1", body=body,
                                     now=now)  # replayed to another URL
        assert not webhooksig.verify(mine, header, tenant="acme", url=url, body=body + b" ", now=now)
        assert not webhooksig.verify(mine, header, tenant="acme", url=url, body=body, now=now + 301)  # too old
    other = webhooksig.tenant_secret(b"new", "globex")  # tenant B's receiver
    assert not webhooksig.verify(other, header, tenant="globex", url=url, body=body, now=now)
    assert not webhooksig.verify(other, header, tenant="acme", url=url, body=body, now=now)
    # tenant B holds its own secret only: what it signs does not verify at tenant A's receiver
    forged = ",".join(["t=1", "n=x", "w1=" + webhooksig.digest(other, t=now, nonce="x", tenant="acme", url=url,
                                                                body=body)])
    assert not webhooksig.verify(webhooksig.tenant_secret(b"new", "acme"), forged.replace("t=1", f"t={now}"),
                                 tenant="acme", url=url, body=body, now=now)
    assert "v1=" not in header  # the one-secret signature is gone unless REACH_CHANNEL_WEBHOOK_LEGACY_V1
    assert not isinstance(signing.verify(b"new", header, body, now=now), signing.Signature)


def test_sms_with_webhook_reports_does_not_poll_and_says_so() -> None:
    api = FakeSmsApi(polls=1)
    provider = SmsProvider(SETTINGS.model_copy(update={"sms_reports": "webhook"}), transport=httpx.MockTransport(api))
    sent = _run(provider.send(MESSAGE.__class__(endpoint="+15551234567", body={"text": "hi"}, message_id="m",
                                                 trace_id="t")))
    assert sent == Sent(provider_message_id="sms-1", delivered=False, reported_later=True)
    assert _run(provider.delivered(sent)) is False and api.polls == 1  # no GET: the report comes to the gateway
