"""Provider reports (reach/channels/reports.py): SMS and IM reports and RFC 3464 DSNs read into Reports, and the
delivery-step receipt each becomes on its message's row; malformed input is a BadReport with a clear reason."""

from __future__ import annotations

import json

import pytest

from reach.channels import reports
from reach.channels.reports import BadReport, Report
from reach.records import Status
from tests.unit.channels.dsn import dsn

ROW = {"message_id": "m-1", "trace_id": "t-1", "tenant": "acme", "capability": "channel.sms", "generation": 2,
       "attempt": 1, "status": "COMPLETED",
       "timeline": [{"status": "SENT", "channel": {"channel": "sms", "provider_message_id": "sms-9"}}]}


def test_an_sms_delivery_report_is_delivered_and_a_failed_one_bounced() -> None:
    ok = reports.parse("sms", json.dumps({"reference": "m-1", "id": "sms-9", "status": "delivered",
                                          "at": 1_700}).encode())
    assert ok == Report(message_id="m-1", status=Status.DELIVERED, provider_message_id="sms-9", at=1_700)
    failed = reports.parse("sms", b'{"reference": "m-1", "status": "undelivered", "error": "handset off"}')
    assert failed.status is Status.BOUNCED and failed.error is not None
    assert (failed.error.code, failed.error.message) == ("SMS_UNDELIVERED", "handset off")


@pytest.mark.parametrize(("event", "status"), [("read", Status.READ), ("ack", Status.READ),
                                               ("DELIVERED", Status.DELIVERED)])
def test_an_im_report_reads_read_and_ack_as_read(event: str, status: Status) -> None:
    report = reports.parse("im", json.dumps({"message_id": "m-2", "event": event}).encode())
    assert (report.message_id, report.status, report.provider_message_id) == ("m-2", status, None)


@pytest.mark.parametrize("returned", ["text/rfc822-headers", "message/rfc822"])
def test_a_dsn_with_action_failed_is_a_bounce_of_the_returned_message(returned: str) -> None:
    report = reports.parse("email", dsn("m-3", returned=returned))
    assert (report.message_id, report.status, report.provider_message_id) == ("m-3", Status.BOUNCED, "<m-3@reach>")
    assert report.error is not None and report.error.code == "DSN_5.1.1"
    assert "nobody@example.com" in report.error.message and "User unknown" in report.error.message


def test_a_dsn_without_returned_headers_names_the_message_by_its_envelope_id() -> None:
    raw = dsn("other", returned="text/plain", envelope_id="m-4", action="delivered", status="2.0.0")
    report = reports.parse("email", raw)
    assert (report.message_id, report.status, report.error) == ("m-4", Status.DELIVERED, None)


@pytest.mark.parametrize(("channel", "raw", "code", "says"), [
    ("sms", b"not json", "bad_report", "not JSON"),
    ("sms", b"[1]", "bad_report", "JSON object"),
    ("sms", b'{"status": "delivered"}', "bad_report", "`reference`"),
    ("sms", b'{"reference": "m/../x", "status": "delivered"}', "bad_report", "`reference`"),
    ("sms", b'{"reference": "m-1", "status": "queued"}', "unsupported_report", "queued"),
    ("sms", b'{"reference": "m-1", "status": "delivered", "at": "soon"}', "bad_report", "unix milliseconds"),
    ("im", b'{"message_id": "m-1", "event": "typing"}', "unsupported_report", "typing"),
    ("email", b"Subject: hi\n\njust a mail", "bad_report", "not a DSN"),
    ("email", dsn("m-1").replace(b"message/delivery-status", b"text/plain"), "bad_report", "delivery-status part"),
    ("email", dsn("m-1", action="delayed", status="4.4.1"), "unsupported_report", "delayed"),
    ("email", dsn("m-1").replace(b"@reach>", b"@elsewhere>"), "bad_report", "names no Reach message"),
    ("email", b"x" * (reports.MAX_REPORT_BYTES + 1), "bad_report", "at most"),
])
def test_a_malformed_report_is_refused_saying_why(channel: str, raw: bytes, code: str, says: str) -> None:
    with pytest.raises(BadReport, match=None) as caught:
        reports.parse(channel, raw)
    assert caught.value.code == code and says in str(caught.value)


def test_the_receipt_takes_trace_tenant_generation_and_provider_id_from_the_row() -> None:
    step = reports.receipt(Report(message_id="m-1", status=Status.DELIVERED), ROW, channel="sms", now_ms=5_000)
    assert (step.message_id, step.trace_id, step.tenant, step.capability, step.generation, step.at) == \
        ("m-1", "t-1", "acme", "channel.sms", 2, 5_000)
    assert step.status is Status.DELIVERED and not step.status.is_terminal
    assert step.channel is not None and (step.channel.channel, step.channel.provider_message_id) == ("sms", "sms-9")
    assert step.agent_id == reports.REPORTER and step.instance_id is None


def test_a_report_for_another_channels_send_or_another_provider_id_is_refused() -> None:
    with pytest.raises(BadReport) as other_channel:
        reports.receipt(Report(message_id="m-1", status=Status.READ), ROW, channel="im", now_ms=1)
    assert other_channel.value.code == "not_a_send"
    with pytest.raises(BadReport) as other_id:
        reports.receipt(Report(message_id="m-1", status=Status.DELIVERED, provider_message_id="sms-1"), ROW,
                        channel="sms", now_ms=1)
    assert other_id.value.code == "provider_id_mismatch"


def test_bounced_is_a_delivery_step_that_never_ends_a_message() -> None:
    assert not Status.BOUNCED.is_terminal
    from reach.records import DELIVERY
    assert Status.BOUNCED in DELIVERY


def test_a_bounce_joins_the_timeline_of_a_completed_send_once_and_keeps_its_status() -> None:
    from reach.core.lifecycle import fold
    from reach.records import ChannelDelivery, Receipt

    def at(status: Status, t: int) -> Receipt:
        return Receipt(message_id="m-1", trace_id="t-1", tenant="acme", capability="channel.email", status=status,
                       at=t, channel=ChannelDelivery(channel="email", provider_message_id="<m-1@reach>"))

    row = None
    for receipt in (at(Status.STARTED, 1), at(Status.SENT, 2), at(Status.DELIVERED, 2), at(Status.COMPLETED, 3)):
        row = fold(row, receipt)
    assert row is not None
    email_row = {**row.model_dump(mode="json")}
    bounce = reports.receipt(reports.parse("email", dsn("m-1")), email_row, channel="email", now_ms=9)
    once = fold(row, bounce)
    twice = fold(once, bounce)  # a replayed report is the same receipt: kept once
    assert once.status is Status.COMPLETED and twice == once
    assert [s.status for s in once.timeline][-1] is Status.BOUNCED
    assert once.timeline[-1].error is not None and once.timeline[-1].error.code == "DSN_5.1.1"


DEEP = b'Content-Type: multipart/report; report-type=delivery-status; boundary="b0"\n\n' + b"".join(
    b'--b%d\nContent-Type: multipart/mixed; boundary="b%d"\n\n' % (i, i + 1) for i in range(3_000))
DEEP_MESSAGES = b"Content-Type: multipart/report; report-type=delivery-status; boundary=B\n\n--B\n" + \
    b"Content-Type: message/rfc822\n\n" * 3_000


@pytest.mark.parametrize(("channel", "raw"), [
    ("email", dsn("m-1").replace(b"Action: failed", b"Action: f\xe9\xffiled")),  # non-ASCII header bytes
    ("email", dsn("m-1").replace(b"Status: 5.1.1", b"Status: 5.\xff1.1")),
    ("email", DEEP),
    ("email", DEEP_MESSAGES),
    ("sms", json.dumps({"reference": "m-1", "status": "delivered", "at": 2**64}).encode()),
    ("im", json.dumps({"message_id": "m-1", "event": "read", "at": 2**63}).encode()),
])
def test_a_hostile_report_is_a_bad_report_never_a_crash(channel: str, raw: bytes) -> None:
    """Security finding (hostile DSNs answered 500): every way a report fails to parse is a BadReport (4xx); what
    does parse holds only text the receipts topic can encode."""
    try:
        found = reports.parse(channel, raw)
    except BadReport:
        return
    assert found.error is not None and found.error.code.encode() and found.error.message.encode()


def test_an_rfc_2231_report_type_is_read_as_the_dsn_it_is() -> None:
    raw = dsn("m-1").replace(b"report-type=delivery-status;", b"report-type*=utf-8''delivery-status;")
    assert reports.parse("email", raw).status is Status.BOUNCED
