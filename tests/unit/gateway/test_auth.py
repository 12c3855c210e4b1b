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
from reach.gateway.auth import MISSING_KEY, MISSING_NONCE, MISSING_SIGNATURE, REPLAY, V1_REFUSED, SignatureAuthenticator
from reach.gateway.nonces import MemoryNonceStore
from reach.gateway.ports import Authenticator, Verified
from reach.secretbox import SecretBox

NOW = 1_764_590_000
BODY = b'{"capability":"search.web","payload":{}}'
TARGET = "/v1/envelopes"


def v2(secret: bytes | list[bytes], t: int = NOW, nonce: str = "nonce-0000", *, method: str = "POST",
       target: str = TARGET, body: bytes = BODY) -> str:
    return signing.sign_request(secret, method=method, target=target, body=body, t=t, nonce=nonce)


class Door:
    """A store, the table it feeds, and an authenticator over both."""

    def __init__(self, *, accept_v1: bool = False) -> None:
        box = SecretBox([SecretStr(Fernet.generate_key().decode())])
        self.log = MemoryAppLog()
        self.store = AppStore(log=self.log, box=box, by="test")
        self.table = AppTable(box)
        self.auth: Authenticator = SignatureAuthenticator(directory=self.table, nonces=MemoryNonceStore(),
                                                           accept_v1=accept_v1)
        made = self.store.create(name="a", tenant="acme", capabilities=[], rate=10, burst=10)
        self.app_id, self.key_id, self.secret = made.app_id, made.key_id, made.secret.encode()
        self.sync()

    def sync(self) -> None:
        self.table.apply(self.app_id, self.log.records[-1])

    def check(self, signature: str | None, *, key_id: str | None = "", body: bytes = BODY, now: int = NOW,
              method: str = "POST", target: str = TARGET) -> Verified | AuthFailure:
        return asyncio.run(self.auth.authenticate(key_id=self.key_id if key_id == "" else key_id,
                                                  signature=signature, method=method, target=target, body=body,
                                                  now=now))


@pytest.fixture
def door() -> Door:
    return Door()


def test_a_good_signature_is_verified_with_its_app(door: Door) -> None:
    outcome = door.check(v2(door.secret, NOW - 5, "nonce-0001"))
    assert isinstance(outcome, Verified)
    assert (outcome.entry.app.app_id, outcome.entry.app.tenant, outcome.timestamp) == (door.app_id, "acme", NOW - 5)
    assert door.secret.decode() not in repr(outcome)  # a logged outcome does not print the secret
    assert outcome.nonce == "nonce-0001"


def test_missing_headers(door: Door) -> None:
    assert door.check(v2(door.secret), key_id=None) == MISSING_KEY
    assert door.check(None) == MISSING_SIGNATURE
    assert door.check("") == MISSING_SIGNATURE


def test_malformed_signature(door: Door) -> None:
    outcome = door.check("t=soon,v1=abc")
    assert isinstance(outcome, AuthFailure) and outcome.code == "malformed"


def test_expired_and_future_timestamps(door: Door) -> None:
    for t in (NOW - 301, NOW + 61):
        outcome = door.check(v2(door.secret, t))
        assert isinstance(outcome, AuthFailure) and outcome.code == "stale"


def test_unknown_key_revoked_key_and_wrong_signature_look_the_same(door: Door) -> None:
    good = v2(door.secret)
    wrong_secret = door.check(v2(b"not-the-secret"))
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
    assert isinstance(door.check(v2(rotated.secret.encode()), key_id=rotated.key_id), Verified)
    door.store.revoke(door.app_id)
    door.sync()
    for key_id, secret in ((door.key_id, door.secret), (rotated.key_id, rotated.secret.encode())):
        assert door.check(v2(secret, nonce="nonce-after"), key_id=key_id) == signing.DENIED


def test_a_replayed_nonce_is_refused_even_under_another_key_of_the_app(door: Door) -> None:
    rotated = door.store.rotate(door.app_id)
    door.sync()
    header = v2([door.secret, rotated.secret.encode()], nonce="nonce-0002")
    assert isinstance(door.check(header), Verified)
    assert door.check(header) == REPLAY
    assert door.check(header, key_id=rotated.key_id) == REPLAY
    assert door.check(header, now=NOW + 30) == REPLAY


def test_a_forged_request_does_not_use_up_the_callers_nonce(door: Door) -> None:
    assert door.check(v2(b"forger", nonce="nonce-0003")) == signing.DENIED
    assert isinstance(door.check(v2(door.secret, nonce="nonce-0003")), Verified)


def test_a_signature_without_a_nonce_is_refused(door: Door) -> None:
    digest = signing.request_digest(door.secret, t=NOW, nonce="", method="POST", target=TARGET, body=BODY)
    assert door.check(signing.header(NOW, [digest], None, "v2")) == MISSING_NONCE
    assert door.check(signing.sign(door.secret, BODY, NOW)) == MISSING_NONCE  # nor a v1 one


def test_a_captured_signature_is_denied_on_another_method_path_or_query(door: Door) -> None:
    """Issue 28, finding 3: before v2, a GET signature (over the empty body) read every route of the tenant."""
    read = v2(door.secret, nonce="nonce-read", method="GET", target="/v1/messages/m1", body=b"")
    for method, target in (("GET", "/v1/traces/t1"), ("GET", "/v1/messages/m2/events"), ("POST", "/v1/messages/m1"),
                           ("GET", "/v1/messages/m1?x=1")):
        assert door.check(read, method=method, target=target, body=b"") == signing.DENIED
    assert isinstance(door.check(read, method="GET", target="/v1/messages/m1", body=b""), Verified)
    listed = v2(door.secret, nonce="nonce-query", method="GET", target="/v1/messages?after=5", body=b"")
    assert door.check(listed, method="GET", target="/v1/messages?after=6", body=b"") == signing.DENIED


def test_v1_is_refused_unless_the_operator_accepts_it_for_this_release(door: Door) -> None:
    legacy = signing.sign(door.secret, BODY, NOW, "nonce-v1-01")
    assert door.check(legacy) == V1_REFUSED
    lenient = Door(accept_v1=True)
    assert isinstance(lenient.check(signing.sign(lenient.secret, BODY, NOW, "nonce-v1-01")), Verified)
    assert lenient.check(signing.sign(lenient.secret, BODY, NOW, "nonce-v1-01")) == REPLAY
    assert lenient.check(signing.sign(b"forger", BODY, NOW, "nonce-v1-02")) == signing.DENIED
    assert isinstance(lenient.check(v2(lenient.secret, nonce="nonce-v2-01")), Verified)


def test_screen_refuses_from_the_headers_alone(door: Door) -> None:
    screen = SignatureAuthenticator(directory=door.table, nonces=MemoryNonceStore()).screen
    assert screen(key_id="k", signature="t=1", now=NOW).code == "malformed"  # type: ignore[union-attr]
    assert screen(key_id="k", signature=v2(b"s", NOW - 1000), now=NOW).code == "stale"  # type: ignore[union-attr]
    assert isinstance(screen(key_id="k", signature=v2(b"any secret: not checked here"), now=NOW), signing.Signature)


def test_every_failure_code_is_a_known_one(door: Door) -> None:
    outcomes = [door.check(None, key_id=None), door.check("x"), door.check(v2(door.secret, 0)),
                door.check(v2(b"x")), REPLAY]
    assert {o.code for o in outcomes if isinstance(o, AuthFailure)} == set(AUTH_FAILURE_CODES)
