"""The callback spec an envelope carries in `Envelope.callback` (pure): which channel, where, which fields.

Canonical form (what `Envelope.callback` holds): JSON `{"channel": "webhook", "endpoint": "https://...",
"fields": ["$.answer"]}`. Short form, accepted wherever a spec is parsed: `webhook:https://...`,
`email:ops@example.com`, `sms:+15551234567` (fields then come separately, e.g. `--callback-fields`),
and a bare `https://...` URL (what the gateway's `callback` body field carries) for a webhook.
An optional `"backup": {"channel": "email", "endpoint": "ops@example.com"}` (another channel) takes the
sends while the primary channel instance is OPEN (reach/channels/health.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reach.channels.catalog import BY_NAME, channel
from reach.channels.errors import BadCallback
from reach.channels.select import check_fields

MAX_SPEC_CHARS = 4_096
_KEYS = frozenset({"channel", "endpoint", "fields", "backup"})
_BACKUP_KEYS = frozenset({"channel", "endpoint"})


@dataclass(frozen=True)
class Target:
    """A channel and an endpoint of its form."""

    channel: str
    endpoint: str

    def to_dict(self) -> dict[str, str]:
        return {"channel": self.channel, "endpoint": self.endpoint}


@dataclass(frozen=True)
class CallbackSpec:
    """Deliver the terminal outcome of a message through `channel` to `endpoint`, with `fields` of its result
    (through `backup` while the primary channel is OPEN)."""

    channel: str
    endpoint: str
    fields: tuple[str, ...] = field(default=())
    backup: Target | None = None

    def to_text(self) -> str:
        """The canonical JSON form stored in `Envelope.callback`."""
        data: dict[str, object] = {"channel": self.channel, "endpoint": self.endpoint, "fields": list(self.fields)}
        if self.backup is not None:
            data["backup"] = self.backup.to_dict()
        return json.dumps(data, separators=(",", ":"))

    @property
    def capability(self) -> str:
        return channel(self.channel).capability


def parse(text: str, *, fields: list[str] | None = None) -> CallbackSpec:
    """The spec in `text` (JSON or short form), with `fields` added; BadCallback saying what is wrong."""
    if not text or len(text) > MAX_SPEC_CHARS:
        raise BadCallback(f"a callback spec is 1 to {MAX_SPEC_CHARS} characters; got {len(text)}.")
    if text.lstrip()[:1] in ("{", "["):
        data = _json(text)
    elif text.startswith(("http://", "https://")):
        data = {"channel": "webhook", "endpoint": text, "fields": []}
    else:
        name, sep, short_endpoint = text.partition(":")
        if not sep or name not in BY_NAME:
            raise BadCallback(f"callback {text[:80]!r} is neither JSON nor CHANNEL:ENDPOINT; expected e.g. "
                              f"webhook:https://example.com/hook (channels: {', '.join(BY_NAME)}).")
        data = {"channel": name, "endpoint": short_endpoint, "fields": []}
    extra = set(data) - _KEYS
    if extra:
        raise BadCallback(f"callback spec has unknown keys {sorted(extra)}; expected {sorted(_KEYS)}.")
    kind_name, endpoint, listed = data.get("channel"), data.get("endpoint"), data.get("fields", [])
    if not isinstance(kind_name, str) or not isinstance(endpoint, str):
        raise BadCallback("callback spec needs string `channel` and `endpoint`, e.g. "
                          '{"channel": "webhook", "endpoint": "https://example.com/hook"}.')
    if not isinstance(listed, list) or not all(isinstance(f, str) for f in listed):
        raise BadCallback('callback `fields` must be a list of JSONPath strings, e.g. ["$.answer"].')
    channel(kind_name).check_endpoint(endpoint)
    backup = target(data["backup"], primary=kind_name) if data.get("backup") is not None else None
    return CallbackSpec(channel=kind_name, endpoint=endpoint, fields=tuple(check_fields([*listed, *(fields or [])])),
                        backup=backup)


def target(data: object, *, primary: str) -> Target:
    """A backup `{channel, endpoint}`: a known channel other than the primary, with an endpoint of its form."""
    if not isinstance(data, dict) or set(data) != _BACKUP_KEYS or not all(isinstance(v, str) for v in data.values()):
        raise BadCallback('callback `backup` must be {"channel": ..., "endpoint": ...} with strings, e.g. '
                          '{"channel": "email", "endpoint": "ops@example.com"}.')
    if data["channel"] == primary:
        raise BadCallback(f"callback `backup` must be another channel than the primary ({primary}).")
    channel(data["channel"]).check_endpoint(data["endpoint"])
    return Target(channel=data["channel"], endpoint=data["endpoint"])


def callback_text(callback: str | None, fields: str | list[str] | None = None) -> str:
    """The canonical spec for `Envelope.callback` from what a sender gave (e.g. `--callback` and
    `--callback-fields '$.a,$.b'`); BadCallback when it cannot be acted on."""
    listed = split_fields(fields) if isinstance(fields, str) else list(fields or [])
    if callback is None:
        raise BadCallback("callback fields were given without a callback; add e.g. --callback webhook:URL.")
    return parse(callback, fields=listed).to_text()


def split_fields(text: str | None) -> list[str]:
    """`--callback-fields '$.a,$.b'` as a list (commas inside brackets or quotes do not split)."""
    if not text:
        return []
    out: list[str] = []
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return [f for f in out if f]


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadCallback(f"callback spec is not valid JSON ({exc}).") from None
    if not isinstance(data, dict):
        raise BadCallback("callback spec JSON must be an object with channel, endpoint and fields.")
    return data
