"""A2A callers authenticate with `Authorization: Bearer <key_id>.rat_<hex>`, a token derived from a gateway app key.

A2A clients can send a bearer token but cannot sign bodies, so the A2A endpoints take a bearer token instead of
the HMAC the /v1 routes check. The token is not the key's secret: it is `rat_` + hex HMAC-SHA256(secret,
"reach a2a bearer v1"), so a token that leaks (a proxy log, a remote agent that forwards it) cannot sign a /v1
request, while one app key still serves both doors (issue 28, finding 12). `reach apps create` and
`reach apps rotate` print it; `a2a_token` makes it from a key id and secret. The same apps directory answers: a
revoked key or app fails here the moment it fails there."""

from __future__ import annotations

import hashlib
import hmac
import secrets as _random

from reach.callers import AppDirectory, AuthFailure, CallerApp
from reach.errors import InfraUnavailable

SCHEME = "reach-app-key"  # the security scheme's name in the agent cards
PREFIX = "bearer "
MAX_TOKEN = 512
TOKEN_PREFIX = "rat_"
_LABEL = b"reach a2a bearer v1"

MISSING = AuthFailure(reason="missing Authorization header: send `Authorization: Bearer <key_id>.rat_<hex>`, "
                             "the A2A token `reach apps create` printed", code="missing")
MALFORMED = AuthFailure(reason="the Authorization header is not `Bearer <key_id>.rat_<hex>`", code="malformed")
DENIED = AuthFailure(reason="the bearer token does not match a live app key: send the A2A token (`rat_...`) "
                            "`reach apps create` printed, not the signing secret, and check that the key and app "
                            "are not revoked (`reach apps ls`)", code="denied")


def derived(secret: bytes) -> str:
    """The token part of an app key's A2A credential."""
    return TOKEN_PREFIX + hmac.new(secret, _LABEL, hashlib.sha256).hexdigest()


def a2a_token(key_id: str, secret: bytes) -> str:
    """What an A2A client sends after `Bearer `: `<key_id>.rat_<hex>`."""
    return f"{key_id}.{derived(secret)}"


class BearerAuthenticator:
    """Key id lookup, then a constant-time compare of the derived token; an unknown key costs the same compare."""

    def __init__(self, directory: AppDirectory) -> None:
        self._directory = directory
        self._decoy = _random.token_bytes(32)

    def authenticate(self, header: str | None) -> CallerApp | AuthFailure:
        if not self._directory.alive:
            raise InfraUnavailable("the gateway's apps directory stopped following the apps topic, so a revoked "
                                   "key could still pass; restart this gateway replica (see its log)")
        if not header:
            return MISSING
        if len(header) > MAX_TOKEN or not header[:len(PREFIX)].lower() == PREFIX:
            return MALFORMED
        key_id, dot, token = header[len(PREFIX):].strip().partition(".")
        if not dot or not key_id or not token:
            return MALFORMED
        entry = self._directory.lookup(key_id)
        expected = derived(entry.secret if entry is not None else self._decoy)
        good = hmac.compare_digest(expected.encode(), token.encode())
        if entry is None or not good:
            return DENIED
        return entry.app
