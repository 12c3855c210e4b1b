"""Reply tokens (pure): the unguessable per-message token an outbound channel message carries, so a reply to it
(`POST /v1/callbacks/{token}` on the gateway) joins the original trace.

A token is self-contained and signed: `base64url(claims) "." base64url(HMAC-SHA256(secret, claims))`, the claims
naming the outbound message, its trace, tenant, the capability a reply goes to by default and when the token
expires. Nothing is stored when one is minted, so no gateway restart, Redis flush or topic loss can forget a
token a person is about to answer (docs/decisions/0015-callback-closure.md); it cannot be guessed or altered
without the secret. A token is single-use: the reply's envelope id is derived from the outbound message
(`<message_id>-re`), claimed once in the gateway's idempotency store and deduplicated by the agent lease if
that claim was ever lost.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

VERSION = 1
REPLY_SUFFIX = "-re"
CALLBACKS_PATH = "/v1/callbacks/"
MAX_TOKEN_CHARS = 2_048


class BadToken(Exception):
    """The token is not one this secret minted (malformed, altered, or signed with another secret)."""


class ExpiredToken(Exception):
    """The token was minted here and its time is up."""


@dataclass(frozen=True, slots=True)
class ReplyClaims:
    """What a token says: the outbound message a reply answers, and where that reply goes by default."""

    message_id: str
    trace_id: str
    tenant: str
    expires_at: int  # epoch ms
    capability: str | None = None  # the reply's default capability (e.g. the one whose outcome was called back)
    answers: str | None = None  # a question's token: the message whose question (INPUT_REQUIRED) a reply answers

    @property
    def reply_id(self) -> str:
        """The reply envelope's message id: one per token, so a second use is the same message."""
        return self.message_id + REPLY_SUFFIX


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, body: str) -> bytes:
    return hmac.new(secret, b"reach-reply." + body.encode(), hashlib.sha256).digest()


def mint(secret: bytes, claims: ReplyClaims) -> str:
    """The token for `claims` (URL-safe: base64url and one dot)."""
    data = {"v": VERSION, "m": claims.message_id, "t": claims.trace_id, "n": claims.tenant, "e": claims.expires_at}
    if claims.capability:
        data["c"] = claims.capability
    if claims.answers:
        data["a"] = claims.answers
    body = _b64(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_b64(_mac(secret, body))}"


def read(secret: bytes, token: str, *, now: int) -> ReplyClaims:
    """The claims of a token this secret minted and not yet expired (BadToken, ExpiredToken otherwise)."""
    body, dot, mac = token.partition(".")
    if not dot or not body or len(token) > MAX_TOKEN_CHARS:
        raise BadToken("not a reply token")
    try:
        good = hmac.compare_digest(_unb64(mac), _mac(secret, body))
        data = json.loads(_unb64(body)) if good else None
    except (binascii.Error, ValueError):
        raise BadToken("not a reply token") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise BadToken("not a reply token of this gateway")
    try:
        claims = ReplyClaims(message_id=str(data["m"]), trace_id=str(data["t"]), tenant=str(data["n"]),
                             expires_at=int(data["e"]), capability=data.get("c"), answers=data.get("a"))
    except (KeyError, TypeError, ValueError):
        raise BadToken("a reply token without its claims") from None
    if claims.expires_at <= now:
        raise ExpiredToken(claims.message_id)
    return claims


def reply_capability(payload: dict[str, Any]) -> str | None:
    """The capability a reply token minted for this channel request names: its `reply_capability`, else the
    capability of the message it calls back (`callback_for`)."""
    closes = payload.get("callback_for")
    named = payload.get("reply_capability") or (closes.get("capability") if isinstance(closes, dict) else None)
    return str(named) if named else None


def answers_of(payload: dict[str, Any]) -> str | None:
    """The message whose question a channel request carries (`answer_for`, written by the status fold): a reply to
    it answers that question (reach.ops.turns) instead of becoming a new envelope."""
    asked = payload.get("answer_for")
    named = asked.get("message_id") if isinstance(asked, dict) else None
    return str(named) if named else None


def named_capabilities(payload: object) -> list[str]:
    """Every capability a channel request names for its reply token (`reply_capability`, `callback_for`): the
    gateway lets an app name only capabilities it may call, or a reply would reach one the app may not."""
    if not isinstance(payload, dict):
        return []
    closes = payload.get("callback_for")
    named = [payload.get("reply_capability"), closes.get("capability") if isinstance(closes, dict) else None]
    return [str(name) for name in named if name]


def reply_url(base_url: str, token: str) -> str:
    """Where a reply to the message is posted."""
    return base_url.rstrip("/") + CALLBACKS_PATH + token
