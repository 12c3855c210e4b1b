"""A2A callers authenticate with `Authorization: Bearer <key_id>.<secret>`, made from a gateway app key.

A2A clients can send a bearer token but cannot sign bodies, so the A2A endpoints take the key's secret
itself (over TLS in production) instead of the HMAC the /v1 routes check. The same apps directory
answers: a revoked key or app fails here the moment it fails there."""

from __future__ import annotations

import hmac
import secrets as _random

from reach.callers import AppDirectory, AuthFailure, CallerApp
from reach.errors import InfraUnavailable

SCHEME = "reach-app-key"  # the security scheme's name in the agent cards
PREFIX = "bearer "
MAX_TOKEN = 512

MISSING = AuthFailure(reason="missing Authorization header: send `Authorization: Bearer <key_id>.<secret>` "
                             "with a key `reach apps create` printed", code="missing")
MALFORMED = AuthFailure(reason="the Authorization header is not `Bearer <key_id>.<secret>`", code="malformed")
DENIED = AuthFailure(reason="the bearer token does not match a live app key: check the key id and secret, "
                            "and that the key and app are not revoked (`reach apps ls`)", code="denied")


class BearerAuthenticator:
    """Key id lookup, then a constant-time compare of the secret; an unknown key costs the same compare."""

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
        key_id, dot, secret = header[len(PREFIX):].strip().partition(".")
        if not dot or not key_id or not secret:
            return MALFORMED
        entry = self._directory.lookup(key_id)
        good = hmac.compare_digest(entry.secret if entry is not None else self._decoy, secret.encode())
        if entry is None or not good:
            return DENIED
        return entry.app
