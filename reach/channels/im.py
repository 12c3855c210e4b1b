"""channel.im: a chat message through an incoming-webhook URL (the caller's channel hook), in a provider's payload.

The provider interface is reach.channels.poster.Format; `slack` (REACH_CHANNEL_IM_PROVIDER) is the first: Slack's
incoming-webhook payload, which Mattermost, Rocket.Chat and Microsoft Teams' Slack-compatible hooks also take:

    {"text": "...", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "..."}}],
     "metadata": {"event_type": "reach_message", "event_payload": {"message_id", "trace_id", "reply_to"?}}}

The POST is the shared signed, SSRF-guarded one (reach/channels/poster.py); a 2xx is SENT and DELIVERED. A read or
an acknowledgement comes later as a provider report (`POST /v1/reports/im`, reach/channels/reports.py): READ.
"""

from __future__ import annotations

import httpx

from reach.channels import guard
from reach.channels.poster import Format, HttpChannel, answer_id, chosen, text_of
from reach.channels.provider import OutboundMessage
from reach.channels.settings import ChannelSettings

MAX_TEXT = 3_000  # Slack's limit of one section block's text


def check_endpoint(endpoint: str) -> str:
    """The incoming-webhook URL of the chat channel."""
    return guard.check_url(endpoint, channel="im", example="https://hooks.slack.com/services/T000/B000/XXXX")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class SlackFormat:
    """Slack's incoming-webhook payload, with the Reach ids as message metadata (the read report names them)."""

    name = "slack"

    def payload(self, message: OutboundMessage) -> object:
        text = _cut(text_of(message.body, message.subject))
        meta = {"message_id": message.message_id, "trace_id": message.trace_id}
        if message.reply_url:
            meta["reply_to"] = message.reply_url
        return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
                "metadata": {"event_type": "reach_message", "event_payload": meta}}

    def provider_id(self, response: httpx.Response) -> str | None:
        return answer_id(response, "ts", "id")  # Slack's hooks answer `ok`; API-style shims answer a ts or an id


PROVIDERS: dict[str, Format] = {"slack": SlackFormat()}


class ImProvider(HttpChannel):
    """The IM channel over the provider REACH_CHANNEL_IM_PROVIDER names."""

    def __init__(self, settings: ChannelSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 resolver: guard.Resolver = guard.resolve) -> None:
        super().__init__(settings, channel="im",
                         format=chosen(PROVIDERS, settings.im_provider, variable="REACH_CHANNEL_IM_PROVIDER"),
                         transport=transport, resolver=resolver)
