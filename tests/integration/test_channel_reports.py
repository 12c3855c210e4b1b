"""IM and ticket channels and provider delivery reports end to end, on the real broker and Redis with the real
`reach router` and `reach gateway` processes: an IM message and a ticket reach loopback HTTP servers (the Slack
payload, the generic JSON ticket API); an IM read report, an SMS delivery report and an email DSN (RFC 3464, about a
mail a real aiosmtpd server took) posted to `POST /v1/reports/{channel}` become READ, DELIVERED and BOUNCED steps in
`reach status`; a report for an unknown message and a malformed DSN are refused and change nothing; the ready query
counts the states."""

from __future__ import annotations

import email
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach import signing
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.client import Client
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import running, wait_for
from tests.integration.channel_servers import FakeSms, Hit, Receiver, listening
from tests.integration.stream_app import ROOT, StreamApp
from tests.integration.test_channels import smtp_server
from tests.integration.test_channels_closure import cli, ready
from tests.integration.test_gateway_http import Gateway

pytestmark = pytest.mark.integration
SECRETS = {"sms": "sms-report-secret", "im": "im-report-secret", "email": "bounce-relay-secret"}


class ChatHook(Receiver):
    """A Slack-style incoming webhook: `ok` for /hooks/..."""

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        return (200, {"ok": True}) if hit.path.startswith("/hooks/") else (404, {"error": "no such hook"})


class Tracker(Receiver):
    """The generic JSON ticket API: 201 with a key for /api/tickets."""

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        if hit.path == "/api/tickets":
            return 201, {"key": f"OPS-{len(self.hits)}"}
        return 404, {"error": "no such project"}


def row(app: StreamApp, message_id: str) -> dict[str, Any] | None:
    try:
        answer = httpx.get(f"{app.url}/messages/{message_id}", timeout=5)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def steps(app: StreamApp, message_id: str) -> list[str]:
    found = row(app, message_id)
    return [s["status"] for s in found["timeline"]] if found else []


def report(gateway: Gateway, channel: str, body: bytes, *, secret: str | None = None) -> httpx.Response:
    path = f"/v1/reports/{channel}"
    signature = signing.sign_request((secret or SECRETS[channel]).encode(), method="POST", target=path, body=body,
                                     t=int(time.time()), nonce=f"n-{time.monotonic_ns()}")
    return gateway.http.post(path, content=body, headers={"Reach-Signature": signature})


def bounce_of(mail: bytes) -> bytes:
    """The DSN a receiving MTA returns for `mail` (RFC 3464: Action failed, the original headers returned)."""
    original = email.message_from_bytes(mail)
    headers = "".join(f"{k}: {v}\n" for k, v in original.items())
    return (f"From: MAILER-DAEMON@mx.test\nTo: {original['From']}\nSubject: Undelivered Mail Returned to Sender\n"
            "MIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"B1\"\n\n"
            "--B1\nContent-Type: text/plain\n\nYour message could not be delivered.\n\n"
            "--B1\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.test\n\n"
            f"Final-Recipient: rfc822; {original['To']}\nAction: failed\nStatus: 5.1.1\n"
            "Diagnostic-Code: smtp; 550 5.1.1 User unknown\n\n"
            f"--B1\nContent-Type: text/rfc822-headers\n\n{headers}\n--B1--\n").encode()


def test_im_and_ticket_deliver_and_reports_become_read_delivered_and_bounced(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream_app: StreamApp) -> None:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    for channel, secret in SECRETS.items():
        monkeypatch.setenv(f"REACH_REPORT_{channel.upper()}_SECRET", secret)
    gateway = Gateway(tmp_path, {})
    kafka, redis, reach, closure = KafkaSettings(), RedisSettings(), ReachSettings(), ClosureSettings()
    urls = ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=3, webhook_allow_private=True)  # loopback
    gateway.start()
    try:
        with ExitStack() as stack:
            chat, tracker = stack.enter_context(listening(ChatHook())), stack.enter_context(listening(Tracker()))
            sms_api = stack.enter_context(listening(FakeSms()))
            inbox, smtp_port = stack.enter_context(smtp_server())
            sms_settings = ChannelSettings(sms_url=f"{sms_api.url}/api", sms_reports="webhook", timeout_s=3)
            mail_settings = ChannelSettings(smtp_host="127.0.0.1", smtp_port=smtp_port, smtp_from="reach@test.local")
            for name, settings in (("im", urls), ("ticket", urls), ("sms", sms_settings), ("email", mail_settings)):
                stack.enter_context(running(channel_agent(name, settings=settings, kafka=kafka, redis=redis,
                                                          reach=reach, closure=closure)))
            client = stack.enter_context(Client())
            wait_for(lambda: ready(stream_app, *(f"agent://channels/{n}" for n in ("im", "ticket", "sms", "email"))),
                     60, "the four channel agents READY", interval=0.2)
            im = client.send("channel.im", {"endpoint": f"{chat.url}/hooks/T1/B2", "body": {"text": "disk full"}})
            ticket = client.send("channel.ticket", {"endpoint": f"{tracker.url}/api/tickets", "subject": "Disk full",
                                                    "body": {"host": "db-1"}})
            sms = client.send("channel.sms", {"endpoint": "+15551234567", "body": {"text": "disk full"}})
            mail = client.send("channel.email", {"endpoint": "nobody@example.com", "body": {"host": "db-1"}})

            # the IM message and the ticket at their loopback servers, signed, in their providers' shapes
            posted = wait_for(lambda: chat.posts("/hooks/T1/B2")[:1], 60, "the IM message at the hook")[0]
            slack = json.loads(posted.body)
            assert slack["text"] == "disk full" and slack["metadata"]["event_payload"]["message_id"] == im
            assert posted.headers["Reach-Message-Id"] == im and "w1=" in posted.headers["Reach-Signature"]
            created = wait_for(lambda: tracker.posts("/api/tickets")[:1], 60, "the ticket at the tracker")[0]
            assert {k: json.loads(created.body)[k] for k in ("title", "reference", "fields")} == \
                {"title": "Disk full", "reference": ticket, "fields": {"host": "db-1"}}
            for mid in (im, ticket):
                wait_for(lambda m=mid: {"SENT", "DELIVERED", "COMPLETED"} <= set(steps(stream_app, m)), 60,
                         f"SENT, DELIVERED and COMPLETED for {mid}")
            sent = next(s for s in row(stream_app, ticket)["timeline"] if s["status"] == "SENT")  # type: ignore[index]
            assert sent["channel"] == {"channel": "ticket", "provider_message_id": "OPS-1", "callback_id": None}
            wait_for(lambda: "COMPLETED" in steps(stream_app, sms) and "COMPLETED" in steps(stream_app, mail), 60,
                     "the SMS and the email sent")
            assert "DELIVERED" not in steps(stream_app, sms)  # the provider has not reported yet (and is not polled)
            assert [h.method for h in sms_api.hits] == ["POST"]

            # the reports: an IM read, the SMS provider's delivery report, the MTA's bounce of the real mail
            assert report(gateway, "im", json.dumps({"message_id": im, "event": "read"}).encode()).status_code == 202
            provider_id = next(iter(sms_api.messages))
            answered = report(gateway, "sms", json.dumps({"reference": sms, "id": provider_id,
                                                          "status": "delivered"}).encode())
            assert answered.status_code == 202, answered.text
            _, raw_mail = wait_for(lambda: inbox.messages[:1], 30, "the email at the SMTP server")[0]
            bounced = report(gateway, "email", bounce_of(raw_mail))
            assert (bounced.status_code, bounced.json()["status"]) == (202, "BOUNCED"), bounced.text
            wait_for(lambda: "READ" in steps(stream_app, im), 60, "READ on the IM message")
            wait_for(lambda: "DELIVERED" in steps(stream_app, sms), 60, "DELIVERED on the SMS")
            wait_for(lambda: "BOUNCED" in steps(stream_app, mail), 60, "BOUNCED on the email")

            # what `reach status` shows: the step with its channel, the bounce with the DSN's status; the row
            # keeps its processing status
            shown = cli("status", mail, "--json")
            bounce = next(s for s in shown["timeline"] if s["status"] == "BOUNCED")
            assert shown["status"] == "COMPLETED" and bounce["channel"]["channel"] == "email"
            assert bounce["error"]["code"] == "DSN_5.1.1" and "User unknown" in bounce["error"]["message"]

            # bad input: an unknown message, a malformed DSN, a forged signature: clear 4xx, nothing written
            before = steps(stream_app, mail)
            unknown = report(gateway, "sms", b'{"reference": "no-such-message", "status": "delivered"}')
            assert (unknown.status_code, unknown.json()["error"]) == (404, "unknown_message")
            malformed = report(gateway, "email", b"Subject: hello\n\nnot a delivery status notification")
            assert (malformed.status_code, malformed.json()["error"]) == (400, "bad_report")
            assert "not a DSN" in malformed.json()["message"]
            forged = report(gateway, "email", bounce_of(raw_mail), secret="guessed")
            assert (forged.status_code, forged.json()["error"]) == (401, "denied")
            assert row(stream_app, "no-such-message") is None and steps(stream_app, mail) == before

            # the ready query over the receipts topic
            counted = cli("receipts", "sql", "--file", str(ROOT / "docs/queries/delivery_states.sql"),
                          "--format", "json")
            by_channel = {r["capability"]: r for r in counted}
            assert (by_channel["channel.im"]["read"], by_channel["channel.sms"]["delivered"],
                    by_channel["channel.email"]["bounced"], by_channel["channel.ticket"]["delivered"]) == (1, 1, 1, 1)
    finally:
        gateway.stop()
