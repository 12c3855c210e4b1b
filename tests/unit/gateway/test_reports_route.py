"""`POST /v1/reports/{channel}` over in-memory dependencies: a signed provider report becomes one delivery-step
receipt on the message it names; an unsigned or wrongly signed one, an unknown message, another channel's send,
a malformed DSN and a channel without a secret each get a clear 4xx and write nothing."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from reach import signing
from reach.channels.settings import ClosureSettings, ReportSettings
from reach.errors import InfraUnavailable
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.records import Receipt, Status
from tests.unit.channels.dsn import dsn
from tests.unit.gateway.fakes import Fakes

SECRETS = ReportSettings(sms_secret=SecretStr("sms-s"), im_secret=SecretStr("im-s"),
                         email_secret=SecretStr("mail-s"))


class FakeReceipts:
    """The receipts topic in memory; `fail` makes the broker not acknowledge."""

    def __init__(self) -> None:
        self.written: list[Receipt] = []
        self.fail = False

    async def receipt(self, receipt: Receipt) -> None:
        if self.fail:
            raise InfraUnavailable("no acknowledgement (fake)")
        self.written.append(receipt)


@pytest.fixture
def fakes() -> Fakes:
    fakes = Fakes()
    for mid, channel, provider_id in (("m-sms", "sms", "sms-9"), ("m-im", "im", "m-im"),
                                      ("m-mail", "email", "<m-mail@reach>"), ("m-echo", None, None)):
        timeline = [{"status": "SENT", "channel": {"channel": channel, "provider_message_id": provider_id}}] \
            if channel else []
        fakes.status.rows[mid] = [{"message_id": mid, "trace_id": f"t-{mid}", "tenant": "acme", "generation": 0,
                                   "capability": f"channel.{channel}" if channel else "demo.echo",
                                   "status": "COMPLETED", "attempt": 1, "timeline": timeline}]
    return fakes


def gateway(fakes: Fakes, sink: FakeReceipts, reports: ReportSettings | None = SECRETS) -> TestClient:
    deps = dataclasses.replace(fakes.deps(), receipts=sink)
    return TestClient(build_gateway(deps, HttpSettings(), closure=ClosureSettings(), reports=reports))


def report(client: TestClient, channel: str, body: bytes, secret: bytes | None, *, t: int | None = None,
           content_type: str = "application/json") -> tuple[int, dict[str, object]]:
    path = f"/v1/reports/{channel}"
    headers = {"Content-Type": content_type}
    if secret is not None:
        headers["Reach-Signature"] = signing.sign_request(secret, method="POST", target=path, body=body,
                                                          t=int(time.time()) if t is None else t,
                                                          nonce="report-nonce-1")
    answer = client.post(path, content=body, headers=headers)
    return answer.status_code, answer.json()


def test_sms_im_and_email_reports_write_delivered_read_and_bounced(fakes: Fakes) -> None:
    sink = FakeReceipts()
    client = gateway(fakes, sink)
    sms = json.dumps({"reference": "m-sms", "id": "sms-9", "status": "delivered"}).encode()
    assert report(client, "sms", sms, b"sms-s") == (202, {"message_id": "m-sms", "trace_id": "t-m-sms",
                                                          "status": "DELIVERED"})
    assert report(client, "im", b'{"message_id": "m-im", "event": "read"}', b"im-s")[0] == 202
    code, body = report(client, "email", dsn("m-mail"), b"mail-s", content_type="message/rfc822")
    assert (code, body["status"]) == (202, "BOUNCED")
    assert [(r.message_id, r.status, r.channel.channel if r.channel else None, r.tenant) for r in sink.written] == [
        ("m-sms", Status.DELIVERED, "sms", "acme"), ("m-im", Status.READ, "im", "acme"),
        ("m-mail", Status.BOUNCED, "email", "acme")]
    assert sink.written[2].error is not None and sink.written[2].error.code == "DSN_5.1.1"


@pytest.mark.parametrize(("channel", "body", "secret", "status", "error"), [
    ("sms", b'{"reference": "m-nobody", "status": "delivered"}', b"sms-s", 404, "unknown_message"),
    ("sms", b'{"reference": "m-sms", "status": "delivered"}', None, 401, "malformed"),
    ("sms", b'{"reference": "m-sms", "status": "delivered"}', b"im-s", 401, "denied"),  # another provider's secret
    ("im", b'{"message_id": "m-sms", "event": "read"}', b"im-s", 409, "not_a_send"),
    ("im", b'{"message_id": "m-echo", "event": "read"}', b"im-s", 409, "not_a_send"),
    ("sms", b'{"reference": "m-sms", "id": "sms-1", "status": "delivered"}', b"sms-s", 409, "provider_id_mismatch"),
    ("email", b"Subject: not a dsn\n\nhello", b"mail-s", 400, "bad_report"),
    ("email", b"", b"mail-s", 400, "bad_report"),
    ("sms", b'{"reference": "m-sms", "status": "sending"}', b"sms-s", 422, "unsupported_report"),
    ("ticket", b"{}", b"sms-s", 404, "reports_off"),
    ("webhook", b"{}", b"sms-s", 404, "reports_off"),
])
def test_a_refused_report_says_why_and_writes_nothing(fakes: Fakes, channel: str, body: bytes, secret: bytes | None,
                                                      status: int, error: str) -> None:
    sink = FakeReceipts()
    code, answer = report(gateway(fakes, sink), channel, body, secret)
    assert (code, answer["error"]) == (status, error), answer
    assert answer["message"] and sink.written == []


def test_a_stale_signature_is_refused(fakes: Fakes) -> None:
    sink = FakeReceipts()
    code, answer = report(gateway(fakes, sink), "sms", b'{"reference": "m-sms", "status": "delivered"}', b"sms-s",
                          t=int(time.time()) - 3_600)
    assert (code, answer["error"], sink.written) == (401, "stale", [])


def test_without_report_secrets_every_report_route_is_off(fakes: Fakes) -> None:
    sink = FakeReceipts()
    client = gateway(fakes, sink, reports=None)
    code, answer = report(client, "sms", b'{"reference": "m-sms", "status": "delivered"}', b"sms-s")
    assert (code, answer["error"], sink.written) == (404, "reports_off", [])


def test_a_broker_that_does_not_acknowledge_is_a_503_to_retry(fakes: Fakes) -> None:
    sink = FakeReceipts()
    sink.fail = True
    code, answer = report(gateway(fakes, sink), "im", b'{"message_id": "m-im", "event": "ack"}', b"im-s")
    assert (code, answer["error"]) == (503, "unavailable")


def test_a_replayed_report_is_the_same_receipt(fakes: Fakes) -> None:
    sink = FakeReceipts()
    client = gateway(fakes, sink)
    t = int(time.time())
    for _ in range(2):
        report(client, "im", b'{"message_id": "m-im", "event": "read"}', b"im-s", t=t)
    assert len(sink.written) == 2 and sink.written[0] == sink.written[1]  # the status fold keeps one step


@pytest.mark.parametrize(("channel", "body", "status", "error"), [
    ("email", dsn("m-mail").replace(b"Action: failed", b"Action: f\xe9\xffiled"), 422, "unsupported_report"),
    ("email", b'Content-Type: multipart/report; report-type=delivery-status; boundary="b0"\n\n' + b"".join(
        b'--b%d\nContent-Type: multipart/mixed; boundary="b%d"\n\n' % (i, i + 1) for i in range(3_000)), 400,
     "bad_report"),
    ("sms", b'{"reference": "m-sms", "id": "sms-9", "status": "delivered", "at": 18446744073709551616}', 400,
     "bad_report"),
])
def test_a_hostile_report_is_a_4xx_and_writes_nothing(fakes: Fakes, channel: str, body: bytes, status: int,
                                                      error: str) -> None:
    """Security finding (hostile DSNs answered 500; an `at` past 2^63 reached the receipts topic)."""
    sink = FakeReceipts()
    secret = {"sms": b"sms-s", "email": b"mail-s"}[channel]
    code, answer = report(gateway(fakes, sink), channel, body, secret)
    assert (code, answer["error"]) == (status, error), answer
    assert sink.written == []
