"""The door's Authenticator: Reach-Key names a live key, Reach-Signature is its v2 HMAC over the method, the
request target and the raw body within the time window, and its nonce has not been seen before.

`screen` is the part that needs no body: the service calls it before reading one, so a request without a
well-formed signature costs no body read (issue 28, finding 10)."""

from __future__ import annotations

import secrets as _random

from reach import signing
from reach.callers import AppDirectory, AuthFailure
from reach.errors import InfraUnavailable
from reach.gateway.ports import AuthOutcome, NonceStore, Verified

MISSING_KEY = AuthFailure(reason="missing Reach-Key header: send the key id `reach apps create` printed",
                          code="missing")
MISSING_SIGNATURE = AuthFailure(reason="missing Reach-Signature header: expected t=<unix seconds>,n=<nonce>,"
                                       "v2=<HMAC-SHA256 hex of `t.n.METHOD.path?query.body`>", code="missing")
MISSING_NONCE = AuthFailure(reason="malformed Reach-Signature: no `n`; every request carries a fresh nonce "
                                   "(t=<unix seconds>,n=<nonce>,v2=<hex>), 8-128 characters of A-Z a-z 0-9 . _ ~ -",
                            code="malformed")
V1_REFUSED = AuthFailure(reason="malformed Reach-Signature: this gateway accepts only v2 signatures, over "
                                "`t.n.METHOD.path?query.body` (docs/http.md, Apps and signatures); an operator "
                                "can accept v1 for one release with REACH_GATEWAY_ACCEPT_V1=true", code="malformed")
REPLAY = AuthFailure(reason="replayed request: this nonce was already used within the signature window; "
                            "send a fresh nonce with every request", code="replay")
MAX_KEY_ID = 128


class SignatureAuthenticator:
    """Checks in this order: headers present and well formed, nonce present, scheme accepted, time window (all
    before the body: `screen`), key and HMAC, then the nonce (claimed last, so a forged request cannot use up a
    caller's nonce). An unknown key, a revoked key and a wrong signature give the same answer, and an unknown
    key costs the same HMAC as a known one. `accept_v1`: v1 headers (no method or target covered) still pass,
    with a nonce, for callers not yet moved to v2."""

    def __init__(self, *, directory: AppDirectory, nonces: NonceStore, max_age_s: int = 300,
                 max_ahead_s: int = 60, accept_v1: bool = False) -> None:
        self._directory = directory
        self._nonces = nonces
        self._max_age_s = max_age_s
        self._max_ahead_s = max_ahead_s
        self._accept_v1 = accept_v1
        self._decoy = _random.token_bytes(32)

    def healthy(self) -> bool:
        return self._directory.alive

    def screen(self, *, key_id: str | None, signature: str | None, now: int) -> signing.Signature | AuthFailure:
        """What can be refused from the headers alone: the parsed signature, or why it is refused."""
        if not key_id:
            return MISSING_KEY
        if not signature:
            return MISSING_SIGNATURE
        sig = signing.parse(signature)
        if isinstance(sig, AuthFailure):
            return sig
        if sig.nonce is None:
            return MISSING_NONCE
        if not sig.v2 and not self._accept_v1:
            return V1_REFUSED
        late = signing.check_time(sig, now=now, max_age_s=self._max_age_s, max_ahead_s=self._max_ahead_s)
        return late if late is not None else sig

    async def authenticate(self, *, key_id: str | None, signature: str | None, method: str, target: str,
                           body: bytes, now: int) -> AuthOutcome:
        if not self._directory.alive:
            raise InfraUnavailable("the gateway's apps directory stopped following the apps topic, so a revoked "
                                   "key could still pass; restart this gateway replica (see its log)")
        sig = self.screen(key_id=key_id, signature=signature, now=now)
        if isinstance(sig, AuthFailure):
            return sig
        entry = self._directory.lookup(key_id) if key_id and len(key_id) <= MAX_KEY_ID else None
        secret = entry.secret if entry is not None else self._decoy
        good = signing.matches_request(secret, sig, method=method, target=target, body=body)
        if self._accept_v1:
            good |= signing.matches(secret, sig, body)
        if entry is None or not good or sig.nonce is None:  # screened: a nonce is there
            return signing.DENIED
        # per app, not per key: during rotation one request may carry a digest for each of the app's keys
        if not await self._nonces.claim(entry.app.app_id, sig.nonce, self._max_age_s + self._max_ahead_s):
            return REPLAY
        return Verified(entry=entry, timestamp=sig.timestamp, nonce=sig.nonce)

    async def release(self, verified: Verified) -> None:
        if verified.nonce is not None:
            await self._nonces.release(verified.entry.app.app_id, verified.nonce)
