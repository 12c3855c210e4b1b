"""RFC 3464 delivery status notifications as MTAs send them (Postfix-style), for the report tests."""

from __future__ import annotations


def dsn(message_id: str, *, action: str = "failed", status: str = "5.1.1", returned: str = "text/rfc822-headers",
        envelope_id: str | None = None) -> bytes:
    """A DSN about the mail `<message_id@reach>` to nobody@example.com."""
    per_message = "Reporting-MTA: dns; mx.example.com\n" + (f"Original-Envelope-Id: {envelope_id}\n" if envelope_id
                                                            else "")
    headers = f"From: reach@localhost\nTo: nobody@example.com\nMessage-ID: <{message_id}@reach>\nSubject: hi\n"
    return f"""From: MAILER-DAEMON@mx.example.com
To: reach@localhost
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="BOUND"

--BOUND
Content-Type: text/plain

The mail could not be delivered to nobody@example.com.

--BOUND
Content-Type: message/delivery-status

{per_message}Arrival-Date: Thu, 3 Dec 2026 06:00:00 +0000

Final-Recipient: rfc822; nobody@example.com
Action: {action}
Status: {status}
Diagnostic-Code: smtp; 550 5.1.1 <nobody@example.com>: Recipient address
    rejected: User unknown in local recipient table

--BOUND
Content-Type: {returned}

{headers}
--BOUND--
""".encode()
