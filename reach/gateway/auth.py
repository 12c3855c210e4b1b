"""The door's Authenticator: Reach-Key names a live key, Reach-Signature is its HMAC over the raw body
within the time window, and a nonce, when sent, has not been seen before."""

from __future__ import annotations

import secrets as _random

from reach import signing
from reach.callers import AppDirectory, AuthFailure
from reach.errors import InfraUnavailable
from reach.gateway.ports import AuthOutcome, NonceStore, Verified

MISSING_KEY = AuthFailure(reason="missing Reach-Key header: send the key id `reach apps create` printed",
                          code="missing")
MISSING_SIGNATURE = AuthFailure(reason="missing Reach-Signature header: expected t=<unix seconds>[,n=<nonce>],"
                                       "v1=<HMAC-SHA256 hex of `t.body` or `t.n.body`>", code="missing")
REPLAY = AuthFailure(reason="replayed request: this nonce was already used within the signature window; "
                            "send a fresh nonce with every request", code="replay")
MAX_KEY_ID = 128


class SignatureAuthenticator:
    """Checks in this order: headers present and well formed, time window, key and HMAC, then the nonce
    (claimed last, so a forged request cannot use up a caller's nonce). An unknown key, a revoked key and a
    wrong signature give the same answer, and an unknown key costs the same HMAC as a known one."""

    def __init__(self, *, directory: AppDirectory, nonces: NonceStore, max_age_s: int = 300,
                 max_ahead_s: int = 60) -> None:
        self._directory = directory
        self._nonces = nonces
        self._max_age_s = max_age_s
        self._max_ahead_s = max_ahead_s
        self._decoy = _random.token_bytes(32)

    def healthy(self) -> bool:
        return self._directory.alive

    async def authenticate(self, *, key_id: str | None, signature: str | None, body: bytes,
                           now: int) -> AuthOutcome:
        if not self._directory.alive:
            raise InfraUnavailable("the gateway's apps directory stopped following the apps topic, so a revoked "
                                   "key could still pass; restart this gateway replica (see its log)")
        if not key_id:
            return MISSING_KEY
        if not signature:
            return MISSING_SIGNATURE
        sig = signing.parse(signature)
        if isinstance(sig, AuthFailure):
            return sig
        late = signing.check_time(sig, now=now, max_age_s=self._max_age_s, max_ahead_s=self._max_ahead_s)
        if late is not None:
            return late
        entry = self._directory.lookup(key_id) if len(key_id) <= MAX_KEY_ID else None
        good = signing.matches(entry.secret if entry is not None else self._decoy, sig, body)
        if entry is None or not good:
            return signing.DENIED
        # per app, not per key: during rotation one request may carry a v1 for each of the app's keys
        if sig.nonce is not None and not await self._nonces.claim(entry.app.app_id, sig.nonce,
                                                            self._max_age_s + self._max_ahead_s):
            return REPLAY
        return Verified(entry=entry, timestamp=sig.timestamp, nonce=sig.nonce)
