"""The door's authenticator over an in-memory directory and nonce store: every way in, every way out."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach import signing
from reach.apps import AppTable
from reach.appstore import AppStore, MemoryAppLog
from reach.callers import AUTH_FAILURE_CODES, AuthFailure
from reach.gateway.auth import MISSING_KEY, MISSING_SIGNATURE, REPLAY, SignatureAuthenticator
from reach.gateway.nonces import MemoryNonceStore
from reach.gateway.ports import Authenticator, Verified
from reach.secretbox import SecretBox

NOW = 1_764_590_000
BODY = b'{"capability":"search.web","payload":{}}'


class Door:
    """A store, the table it feeds, and an authenticator over both."""

    def __init__(self) -> None:
        box = SecretBox([SecretStr(Fernet.generate_key().decode())])
        self.log = MemoryAppLog()
        self.store = AppStore(log=self.log, box=box, by="test")
        self.table = AppTable(box)
        self.auth: Authenticator = SignatureAuthenticator(directory=self.table, nonces=MemoryNonceStore())
        made = self.store.create(name="a", tenant="acme", capabilities=[], rate=10, burst=10)
        self.app_id, self.key_id, self.secret = made.app_id, made.key_id, made.secret.encode()
        self.sync()

    def sync(self) -> None:
        self.table.apply(self.app_id, self.log.records[-1])

    def check(self, signature: str | None, *, key_id: str | None = "", body: bytes = BODY,
              now: int = NOW) -> Verified | AuthFailure:
        return asyncio.run(self.auth.authenticate(key_id=self.key_id if key_id == "" else key_id,
                                                  signature=signature, body=body, now=now))


@pytest.fixture
def door() -> Door:
    return Door()


def test_a_good_signature_is_verified_with_its_app(door: Door) -> None:
    outcome = door.check(signing.sign(door.secret, BODY, NOW - 5))
    assert isinstance(outcome, Verified)
    assert (outcome.entry.app.app_id, outcome.entry.app.tenant, outcome.timestamp) == (door.app_id, "acme", NOW - 5)
    assert door.secret.decode() not in repr(outcome)  # a logged outcome does not print the secret
    with_nonce = door.check(signing.sign(door.secret, BODY, NOW, "nonce-0001"))
    assert isinstance(with_nonce, Verified) and with_nonce.nonce == "nonce-0001"


def test_missing_headers(door: Door) -> None:
    assert door.check(signing.sign(door.secret, BODY, NOW), key_id=None) == MISSING_KEY
    assert door.check(None) == MISSING_SIGNATURE
    assert door.check("") == MISSING_SIGNATURE


def test_malformed_signature(door: Door) -> None:
    outcome = door.check("t=soon,v1=abc")
    assert isinstance(outcome, AuthFailure) and outcome.code == "malformed"


def test_expired_and_future_timestamps(door: Door) -> None:
    for t in (NOW - 301, NOW + 61):
        outcome = door.check(signing.sign(door.secret, BODY, t))
        assert isinstance(outcome, AuthFailure) and outcome.code == "stale"


def test_unknown_key_revoked_key_and_wrong_signature_look_the_same(door: Door) -> None:
    good = signing.sign(door.secret, BODY, NOW)
    wrong_secret = door.check(signing.sign(b"not-the-secret", BODY, NOW))
    other_body = door.check(good, body=BODY + b" ")
    unknown_key = door.check(good, key_id="key_nope")
    huge_key = door.check(good, key_id="k" * 10_000)
    door.store.revoke(door.app_id, key_id=door.key_id)
    door.sync()
    revoked_key = door.check(good)
    assert wrong_secret == other_body == unknown_key == huge_key == revoked_key == signing.DENIED
    assert door.secret.decode() not in signing.DENIED.reason and door.key_id not in signing.DENIED.reason


def test_a_revoked_app_is_denied_for_every_key(door: Door) -> None:
    rotated = door.store.rotate(door.app_id)
    door.sync()
    assert isinstance(door.check(signing.sign(rotated.secret.encode(), BODY, NOW), key_id=rotated.key_id), Verified)
    door.store.revoke(door.app_id)
    door.sync()
    for key_id, secret in ((door.key_id, door.secret), (rotated.key_id, rotated.secret.encode())):
        assert door.check(signing.sign(secret, BODY, NOW), key_id=key_id) == signing.DENIED


def test_a_replayed_nonce_is_refused_even_under_another_key_of_the_app(door: Door) -> None:
    rotated = door.store.rotate(door.app_id)
    door.sync()
    header = signing.sign_with([door.secret, rotated.secret.encode()], BODY, NOW, "nonce-0002")
    assert isinstance(door.check(header), Verified)
    assert door.check(header) == REPLAY
    assert door.check(header, key_id=rotated.key_id) == REPLAY
    assert door.check(header, now=NOW + 30) == REPLAY


def test_a_forged_request_does_not_use_up_the_callers_nonce(door: Door) -> None:
    assert door.check(signing.sign(b"forger", BODY, NOW, "nonce-0003")) == signing.DENIED
    assert isinstance(door.check(signing.sign(door.secret, BODY, NOW, "nonce-0003")), Verified)


def test_without_a_nonce_the_same_request_is_accepted_again_within_the_window(door: Door) -> None:
    header = signing.sign(door.secret, BODY, NOW)
    assert isinstance(door.check(header), Verified) and isinstance(door.check(header), Verified)


def test_every_failure_code_is_a_known_one(door: Door) -> None:
    outcomes = [door.check(None, key_id=None), door.check("x"), door.check(signing.sign(door.secret, BODY, 0)),
                door.check(signing.sign(b"x", BODY, NOW)), REPLAY]
    assert {o.code for o in outcomes if isinstance(o, AuthFailure)} == set(AUTH_FAILURE_CODES)
