"""channel.sms: a pluggable HTTP SMS provider with a generic JSON API (any provider that speaks it, or a shim).

    POST {url}/messages {"to", "from", "text", "reference"} -> 2xx {"id": "...", "status": "queued"|"delivered"}
    GET  {url}/messages/{id}                                -> 2xx {"id": "...", "status": "queued"|"delivered"}

Authorization is `Bearer <REACH_CHANNEL_SMS_TOKEN>` when a token is set. The POST's 2xx is SENT; DELIVERED
when the answer or a poll of the delivery report (up to REACH_CHANNEL_SMS_DELIVERY_WAIT_S) says `delivered`, or,
with REACH_CHANNEL_SMS_REPORTS=webhook, when the provider posts its report to the gateway (`POST /v1/reports/sms`
with `reference` = the message id; reach/channels/reports.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any
from urllib.parse import quote

import httpx

from reach.bodylimit import RECEIVER_ANSWER_BYTES, bound
from reach.channels.errors import BadCallback, ChannelMisconfigured
from reach.channels.http import transport_failure
from reach.channels.provider import Failure, FailureKind, OutboundMessage, SendOutcome, Sent, classify_status
from reach.channels.settings import ChannelSettings

_NUMBER = re.compile(r"\+?[0-9]{6,15}")
MAX_TEXT = 1_600  # ten concatenated segments: longer texts are cut, with an ellipsis


def check_endpoint(endpoint: str) -> str:
    """A phone number in E.164 form, e.g. +15551234567."""
    if not _NUMBER.fullmatch(endpoint):
        raise BadCallback(f"sms endpoint {endpoint[:200]!r} is not a phone number; expected E.164, e.g. +15551234567.")
    return endpoint


def text_of(body: dict[str, Any]) -> str:
    """The SMS text: the body's `text` when it is a string, else the body as compact JSON."""
    text = body.get("text")
    out = text if isinstance(text, str) else json.dumps(body, separators=(",", ":"), sort_keys=True)
    return out if len(out) <= MAX_TEXT else out[: MAX_TEXT - 1] + "…"


class SmsProvider:
    """The generic JSON SMS API over httpx."""

    channel = "sms"

    def __init__(self, settings: ChannelSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not settings.sms_url:
            raise ChannelMisconfigured("channel.sms needs REACH_CHANNEL_SMS_URL (the provider API's base URL); "
                                       "set it and start again.")
        headers = {"Authorization": f"Bearer {settings.sms_token.get_secret_value()}"} if settings.sms_token else {}
        self._base = settings.sms_url.rstrip("/")
        self._settings = settings
        self._client = bound(httpx.AsyncClient(timeout=settings.timeout_s, headers=headers, transport=transport),
                             RECEIVER_ANSWER_BYTES, "the SMS provider")  # its answers: a transport failure past that

    async def send(self, message: OutboundMessage) -> SendOutcome:
        payload = {"to": message.endpoint, "from": self._settings.sms_sender, "text": text_of(message.body),
                   "reference": message.message_id}
        if message.reply_url:
            payload["reply_url"] = message.reply_url  # the provider posts the recipient's answer there
        try:
            response = await self._client.post(f"{self._base}/messages", json=payload)
        except httpx.HTTPError as exc:
            return transport_failure(exc, self._base)
        failure = classify_status(response.status_code, retry_after=response.headers.get("Retry-After"))
        if failure is not None:
            return failure
        answer = _json(response)
        provider_id = answer.get("id")
        if not isinstance(provider_id, (str, int)) or not str(provider_id):
            return Failure(FailureKind.RETRYABLE, "BAD_PROVIDER_ANSWER",
                           f"the SMS provider accepted the send but named no message id: {response.text[:200]!r}")
        return Sent(provider_message_id=str(provider_id), delivered=answer.get("status") == "delivered",
                    reported_later=self._settings.sms_reports == "webhook")

    async def delivered(self, sent: Sent) -> bool:
        """Poll the delivery report until delivered or the wait is over (False: only SENT is known); with
        REACH_CHANNEL_SMS_REPORTS=webhook, no poll: the provider's report at the gateway writes DELIVERED."""
        if sent.delivered or sent.reported_later:
            return sent.delivered
        deadline = time.monotonic() + self._settings.sms_delivery_wait_s
        url = f"{self._base}/messages/{quote(sent.provider_message_id, safe='')}"
        while True:
            try:
                response = await self._client.get(url)
                if response.status_code == 200 and _json(response).get("status") == "delivered":
                    return True
            except httpx.HTTPError:
                pass  # a report that cannot be read now may be read on the next poll
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self._settings.sms_poll_s)

    async def aclose(self) -> None:
        await self._client.aclose()


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
