"""Provider delivery reports (pure): an SMS delivery report, an IM read / acknowledgement, an email DSN (RFC 3464)
read into a `Report`, and the delivery-step receipt it becomes on the message it names.

How a report finds its message (docs/decisions/0037-provider-reports.md): every send already names the Reach
message id to its provider (the SMS `reference`, the IM payload's `metadata.event_payload.message_id`, the email's
`Message-ID: <message_id@reach>`), and the provider's report gives it back; the gateway reads that message's
status row, so the receipt's trace, tenant, capability and generation come from the platform, never from the
report. A report for a message that is not a send of its channel is refused and nothing is written.

- sms: JSON `{"reference": <message_id>, "id"?: <provider id>, "status": "delivered" | "failed" | "undelivered",
  "at"?: <unix ms>, "error"?: "..."}`: DELIVERED, or BOUNCED.
- im: JSON `{"message_id": <message_id>, "event": "read" | "ack" | "delivered", "at"?: <unix ms>}`: READ (read,
  ack) or DELIVERED.
- email: an RFC 3464 DSN (`multipart/report; report-type=delivery-status`), raw: BOUNCED (Action failed), DELIVERED
  (delivered, relayed); a `delayed` DSN changes nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email import message_from_bytes
from email.message import Message
from email.parser import HeaderParser
from email.policy import compat32
from email.utils import collapse_rfc2231_value, decode_rfc2231
from typing import Any
from urllib.parse import unquote

from reach.channels.errors import ChannelError
from reach.records import ChannelDelivery, ErrorInfo, Receipt, Status

MAX_REPORT_BYTES = 256 * 1024
MAX_AT = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z in unix ms: a provider's `at` past it is no time
MAX_CONTAINERS = 16  # multipart and message/* parts a DSN may have (a real one has two or three)
_CONTAINER = re.compile(rb"content-type\s*:\s*(?:multipart|message)/", re.IGNORECASE)
_ID = re.compile(r"[A-Za-z0-9._:~-]{1,200}")
_REACH_MESSAGE_ID = re.compile(r"<([A-Za-z0-9._:~-]{1,200})@reach>")
REPORTER = "reach://reports"  # the receipts' agent_id: written by the gateway for the provider, not by an agent
SMS_STATES = {"delivered": Status.DELIVERED, "failed": Status.BOUNCED, "undelivered": Status.BOUNCED}
IM_STATES = {"read": Status.READ, "ack": Status.READ, "delivered": Status.DELIVERED}
DSN_STATES = {"failed": Status.BOUNCED, "delivered": Status.DELIVERED, "relayed": Status.DELIVERED}


class BadReport(ChannelError, ValueError):
    """A report that cannot be read (not JSON, a malformed DSN, no message id, an unknown state): nothing is
    written. `code` is the gateway's error code."""

    def __init__(self, message: str, *, code: str = "bad_report") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Report:
    """What a provider reported about one send."""

    message_id: str
    status: Status
    provider_message_id: str | None = None
    at: int | None = None  # when the provider saw it (unix ms), when it says
    error: ErrorInfo | None = None  # why, on BOUNCED


def _message_id(value: object, where: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise BadReport(f"the report's {where} must be the Reach message id the send carried (1-200 characters of "
                        f"A-Z a-z 0-9 . _ : ~ -); got {str(value)[:80]!r}")
    return value


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BadReport(f"the report is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadReport("the report must be a JSON object")
    return data


def _at(data: dict[str, Any]) -> int | None:
    at = data.get("at")
    if at is None:
        return None
    if not isinstance(at, int) or isinstance(at, bool) or not 0 < at <= MAX_AT:
        raise BadReport(f"the report's `at` must be unix milliseconds (1 to {MAX_AT}); got {str(at)[:40]!r}")
    return at


def _state(value: object, states: dict[str, Status], what: str) -> Status:
    if not isinstance(value, str) or value.lower() not in states:
        raise BadReport(f"{what} {str(value)[:40]!r} is not one this route records; expected one of "
                        f"{', '.join(states)}", code="unsupported_report")
    return states[value.lower()]


def sms_report(raw: bytes) -> Report:
    """An SMS provider's delivery report."""
    data = _json(raw)
    status = _state(data.get("status"), SMS_STATES, "SMS status")
    provider_id = data.get("id")
    reason = data.get("error")
    error = ErrorInfo(kind="DELIVERY", code="SMS_UNDELIVERED", message=str(reason or data["status"])[:500]) \
        if status is Status.BOUNCED else None
    return Report(message_id=_message_id(data.get("reference"), "`reference`"), status=status,
                  provider_message_id=str(provider_id)[:200] if isinstance(provider_id, (str, int)) else None,
                  at=_at(data), error=error)


def im_report(raw: bytes) -> Report:
    """An IM provider's read or acknowledgement webhook."""
    data = _json(raw)
    status = _state(data.get("event"), IM_STATES, "IM event")
    return Report(message_id=_message_id(data.get("message_id"), "`message_id`"), status=status, at=_at(data))


def dsn_report(raw: bytes) -> Report:
    """An RFC 3464 delivery status notification: the recipient's Action, and the original message's id from its
    returned headers (`Message-ID: <message_id@reach>`) or the DSN's Original-Envelope-Id."""
    if len(_CONTAINER.findall(raw)) > MAX_CONTAINERS:
        raise BadReport(f"the DSN has more than {MAX_CONTAINERS} multipart or message parts; a DSN has two or three")
    mail = message_from_bytes(raw, policy=compat32)
    if mail.get_content_type() != "multipart/report" or _param(mail, "report-type").lower() != "delivery-status":
        raise BadReport("not a DSN: expected Content-Type multipart/report; report-type=delivery-status (RFC 3464)")
    status_part = next((p for p in mail.walk() if p.get_content_type() == "message/delivery-status"), None)
    if status_part is None:
        raise BadReport("the DSN has no message/delivery-status part")
    blocks = _blocks(status_part)
    if len(blocks) < 2:
        raise BadReport("the DSN's delivery-status has no per-recipient fields (RFC 3464 2.3)")
    per_message, recipients = blocks[0], blocks[1:]
    actions = [_field(r, "Action").lower() for r in recipients]
    chosen = next((i for i, a in enumerate(actions) if a == "failed"), None)
    if chosen is None:
        chosen = next((i for i, a in enumerate(actions) if a in DSN_STATES), None)
    if chosen is None:
        raise BadReport(f"the DSN's actions {actions} are not final (failed, delivered, relayed); a delayed DSN "
                        "changes no state", code="unsupported_report")
    recipient = recipients[chosen]
    status = DSN_STATES[actions[chosen]]
    code = _field(recipient, "Status")[:32]  # RFC 3464: `5.1.1`; a longer one is cut, not carried
    error = None
    if status is Status.BOUNCED:
        diagnostic = " ".join(_field(recipient, "Diagnostic-Code").split())
        final = _field(recipient, "Final-Recipient")
        error = ErrorInfo(kind="DELIVERY", code=f"DSN_{code}" if code else "DSN_FAILED",
                          message=f"{final or 'the recipient'}: {diagnostic or 'delivery failed'}"[:500])
    message_id = _original_id(mail, per_message)
    return Report(message_id=message_id, status=status, provider_message_id=f"<{message_id}@reach>", error=error)


def _field(block: Message, name: str) -> str:
    """A header field as text: a field with non-ASCII bytes is a Header object under compat32, not a str."""
    value = block.get(name)
    return str(value).strip()[:1_000] if value is not None else ""


def _param(mail: Message, name: str) -> str:
    """A Content-Type parameter as text (an RFC 2231 `name*=` value comes back as a tuple)."""
    value = mail.get_param(name)
    if value is None and isinstance(extended := mail.get_param(name + "*"), str):  # kept raw by compat32
        parts = decode_rfc2231(extended)
        value = (parts[0], parts[1], unquote(parts[2])) if len(parts) == 3 else parts[-1]
    if isinstance(value, tuple):
        return str(collapse_rfc2231_value(value))
    return value if isinstance(value, str) else ""


def _blocks(part: Message) -> list[Message]:
    """The field blocks of a message/delivery-status part (the email package parses them as messages)."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [b for b in payload if isinstance(b, Message)]
    text = payload if isinstance(payload, str) else ""
    return [HeaderParser().parsestr(chunk.strip() + "\n") for chunk in re.split(r"\r?\n\r?\n", text) if chunk.strip()]


def _original_id(mail: Message, per_message: Message) -> str:
    for part in mail.walk():
        kind = part.get_content_type()
        if kind == "message/rfc822":
            inner = part.get_payload()
            headers = inner[0] if isinstance(inner, list) and inner else None
        elif kind == "text/rfc822-headers":
            headers = HeaderParser().parsestr(str(part.get_payload()))
        else:
            continue
        if isinstance(headers, Message):
            found = _REACH_MESSAGE_ID.fullmatch(_field(headers, "Message-ID"))
            if found:
                return found.group(1)
    envelope_id = _field(per_message, "Original-Envelope-Id")
    if envelope_id:
        return _message_id(envelope_id, "Original-Envelope-Id")
    raise BadReport("the DSN names no Reach message: no returned Message-ID <id@reach> and no Original-Envelope-Id")


PARSERS = {"sms": sms_report, "im": im_report, "email": dsn_report}
"""The channels that take reports, each with its reader."""


def parse(channel: str, raw: bytes) -> Report:
    """The report `raw` as channel `channel`'s provider sent it; BadReport saying what is wrong."""
    if len(raw) > MAX_REPORT_BYTES:
        raise BadReport(f"a report is at most {MAX_REPORT_BYTES:,} bytes; got {len(raw):,}")
    try:
        return PARSERS[channel](raw)
    except BadReport:
        raise
    except (ValueError, TypeError, LookupError, AttributeError, RecursionError, UnicodeError) as exc:
        # a hostile report (odd encodings, nesting, huge numbers) is the sender's mistake: 400, never a crash
        raise BadReport(f"the report could not be read ({type(exc).__name__}: {str(exc)[:120]})") from None


def receipt(report: Report, row: dict[str, Any], *, channel: str, now_ms: int) -> Receipt:
    """The delivery step `report` writes on the message of status row `row` (trace, tenant, capability and generation
    from the row); BadReport when the row is not a send of `channel`, or the report names another provider id than
    the send's SENT step."""
    capability = str(row.get("capability", ""))
    if capability != f"channel.{channel}":
        raise BadReport(f"message {report.message_id} is not a {channel} send (its capability is {capability}); "
                        f"post the report to /v1/reports/<its channel>", code="not_a_send")
    sent = [s.get("channel") or {} for s in row.get("timeline") or [] if s.get("status") == Status.SENT.value]
    sent_ids = {str(c.get("provider_message_id")) for c in sent if c.get("provider_message_id")}
    if report.provider_message_id and sent_ids and report.provider_message_id not in sent_ids:
        raise BadReport(f"the report names provider id {report.provider_message_id!r}, but message "
                        f"{report.message_id} was sent as {sorted(sent_ids)}", code="provider_id_mismatch")
    provider_id = report.provider_message_id or (sorted(sent_ids)[0] if sent_ids else None)
    return Receipt(message_id=report.message_id, generation=int(row.get("generation", 0)),
                   trace_id=str(row["trace_id"]), tenant=str(row["tenant"]), capability=capability,
                   agent_id=REPORTER, status=report.status, attempt=max(1, int(row.get("attempt") or 1)),
                   at=report.at or now_ms, error=report.error,
                   channel=ChannelDelivery(channel=channel, provider_message_id=provider_id))
