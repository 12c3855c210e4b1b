"""`POST /v1/reports/{channel}`: a provider's delivery report (an SMS delivery report, an IM read or acknowledgement,
an email DSN) becomes a delivery-step receipt (DELIVERED, READ or BOUNCED) on the message it names.

Authenticated per provider: `Reach-Signature` v2 (reach/signing.py, over the method, the path and the raw body,
within 5 minutes) under the channel's own REACH_REPORT_<CHANNEL>_SECRET; a channel without one answers 404
`reports_off`. The report is read by reach/channels/reports.py (pure) and names only a message id: the receipt's
trace, tenant, capability and generation come from that message's status row, and it goes to `<ns>.receipts`, the
one topic a report can reach. An unknown message (404 `unknown_message`), a message that is not a send of this
channel (409 `not_a_send`), a provider id other than the send's (409 `provider_id_mismatch`), a malformed report
or DSN (400 `bad_report`) and a state the route does not record (422 `unsupported_report`) write nothing
(docs/decisions/0037-provider-reports.md). The receipt's time is the provider's `at`, else the signature's `t`:
a replayed report is the same receipt, which the status fold keeps once.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter

from reach import signing
from reach.callers import AuthFailure
from reach.channels.reports import PARSERS, BadReport, parse, receipt
from reach.channels.settings import ReportSettings
from reach.errors import InfraUnavailable
from reach.gateway import checks
from reach.gateway.intake import Admission
from reach.gateway.openapi import ERRORS
from reach.gateway.publisher import BrokerRefused
from reach.gateway.routes_envelopes import read_limited

REPORTS_PATH = "/v1/reports/"
OUTCOMES = ("recorded", "refused", "unknown", "denied")
STATUS_OF = {"bad_report": 400, "unsupported_report": 422, "not_a_send": 409, "provider_id_mismatch": 409}
REPORT_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "description": "an SMS or IM report (docs/channels.md)"}},
    "message/rfc822": {"schema": {"type": "string", "description": "an email DSN (RFC 3464), raw"}}}}}


def report_routes(admission: Admission, settings: ReportSettings | None) -> APIRouter:
    router = APIRouter(tags=["reports"])
    deps, http = admission.deps, admission.settings
    counted = Counter("agentreach_gateway_reports_total", "Provider delivery reports at /v1/reports by outcome",
                      ["channel", "outcome"], registry=admission.metrics.registry)

    def key_of(channel: str) -> bytes:
        """The channel's report secret, or 404 `reports_off` (before any body byte is read)."""
        key = settings.key(channel) if settings is not None and channel in PARSERS else None
        if key is None:
            raise checks.Refusal(404, "reports_off", f"this gateway takes no {channel[:20]} reports",
                                 f"channels with reports: {', '.join(PARSERS)}; set REACH_REPORT_<CHANNEL>_SECRET")
        return key

    def authenticated(channel: str, key: bytes, request: Request, body: bytes) -> int:
        """The signature's time (unix s) when the channel's provider signed this exact request; else a Refusal."""
        sig = signing.parse(request.headers.get("Reach-Signature") or "")
        if not isinstance(sig, AuthFailure):
            sig = signing.check_time(sig, now=deps.clock_ms() // 1000) or sig
        if not isinstance(sig, AuthFailure) and not signing.matches_request(
                key, sig, method="POST", target=signing.request_target(request.url.path, request.url.query),
                body=body):
            sig = signing.DENIED
        if isinstance(sig, AuthFailure):
            counted.labels(channel, "denied").inc()
            raise checks.Refusal(401, sig.code, f"the report is not signed by the {channel} provider: {sig.reason}",
                                 f"sign it with REACH_REPORT_{channel.upper()}_SECRET (Reach-Signature v2)")
        return sig.timestamp

    @router.post(REPORTS_PATH + "{channel}", status_code=202, openapi_extra=REPORT_BODY,
                 responses={**ERRORS, 409: {"description": "not a send of this channel, or another provider id"},
                            422: {"description": "a state this route does not record"}},
                 summary="A provider's delivery report: DELIVERED, READ or BOUNCED on the message it names")
    async def report(channel: str, request: Request) -> JSONResponse:
        """202 once the delivery step is on the bus (signed by the channel's provider)."""
        key = key_of(channel)
        raw = await read_limited(request, http.max_body_bytes, http.body_timeout)
        signed_at = authenticated(channel, key, request, raw)
        try:
            found = parse(channel, raw)
            code, row = await deps.status.message(found.message_id)
            if code == 404:
                counted.labels(channel, "unknown").inc()
                raise checks.Refusal(404, "unknown_message", f"no message {found.message_id!r} in the status table: "
                                     "the report names a message this platform did not send (or one past retention)",
                                     "check the provider's reference; nothing was recorded")
            if code != 200:
                raise checks.Refusal(503, "unavailable", "the status table did not answer", "post the report again",
                                     headers={"Retry-After": "1"})
            step = receipt(found, row, channel=channel, now_ms=signed_at * 1000)
        except BadReport as exc:
            counted.labels(channel, "refused").inc()
            raise checks.Refusal(STATUS_OF.get(exc.code, 400), exc.code, str(exc), "nothing was recorded") from None
        if deps.receipts is None:
            raise checks.Refusal(503, "unavailable", "this gateway does not record reports")
        try:
            await deps.receipts.receipt(step)
        except (InfraUnavailable, BrokerRefused) as exc:
            raise checks.Refusal(503, "unavailable", str(exc), "post the report again",
                                 headers={"Retry-After": "1"}) from None
        counted.labels(channel, "recorded").inc()
        return JSONResponse({"message_id": step.message_id, "trace_id": step.trace_id, "status": step.status.value},
                            status_code=202)

    return router
