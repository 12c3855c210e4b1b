"""Request signatures: sign -> verify round-trips, any flipped bit fails, malformed headers say why."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach import signing
from reach.callers import AuthFailure
from reach.signing import Signature

SECRET = b"rs_test-secret"
NOW = 1_764_590_000
nonces = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._~-", min_size=8,
                 max_size=128)
optional_nonces = st.none() | nonces
bodies = st.binary(max_size=512)
stamps = st.integers(min_value=NOW - 300, max_value=NOW + 60)


def test_the_signature_is_stripe_s_scheme() -> None:
    body = b'{"capability":"search.web"}'
    expected = hmac.new(SECRET, b"1764590000." + body, hashlib.sha256).hexdigest()
    assert signing.sign(SECRET, body, NOW) == f"t=1764590000,v1={expected}"
    with_nonce = hmac.new(SECRET, b"1764590000.abcdefgh." + body, hashlib.sha256).hexdigest()
    assert signing.sign(SECRET, body, NOW, "abcdefgh") == f"t=1764590000,n=abcdefgh,v1={with_nonce}"


def test_the_examples_in_docs_http_md() -> None:
    assert signing.sign(b"rs_example", b"{}", 1764590000) == (
        "t=1764590000,v1=11bd7927e6b73fe139362d0f3bb82b6ff091db1fc928ec3212472aeab519e413")
    assert signing.sign(b"rs_example", b"{}", 1764590000, "b1c7e2a4f0d94c55") == (
        "t=1764590000,n=b1c7e2a4f0d94c55,v1=013543df13129ad46e26ab8f2635534243677e0ef591005a546b74b036b6a0ae")


@settings(deadline=None)  # a shared box: a slow example is not a bug
@given(body=bodies, t=stamps, nonce=optional_nonces, secret=st.binary(min_size=1, max_size=64))
def test_sign_then_verify_round_trips(body: bytes, t: int, nonce: str | None, secret: bytes) -> None:
    outcome = signing.verify(secret, signing.sign(secret, body, t, nonce), body, now=NOW)
    assert isinstance(outcome, Signature) and (outcome.timestamp, outcome.nonce) == (t, nonce)


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@settings(deadline=None)  # a shared box: a slow example is not a bug
@given(body=bodies.filter(bool), t=stamps, nonce=optional_nonces, data=st.data())
def test_any_bit_flip_in_the_body_fails(body: bytes, t: int, nonce: str | None, data: st.DataObject) -> None:
    header = signing.sign(SECRET, body, t, nonce)
    bit = data.draw(st.integers(0, len(body) * 8 - 1))
    assert signing.verify(SECRET, header, _flip(body, bit), now=NOW) == signing.DENIED


@settings(deadline=None)  # a shared box: a slow example is not a bug
@given(body=bodies, t=stamps, nonce=nonces, other_t=stamps, other_nonce=nonces)
def test_a_changed_timestamp_or_nonce_fails(body: bytes, t: int, nonce: str, other_t: int, other_nonce: str) -> None:
    digest = signing.digest(SECRET, body, t, nonce)
    if other_t != t:
        assert signing.verify(SECRET, signing.header(other_t, [digest], nonce), body, now=NOW) == signing.DENIED
    if other_nonce != nonce:
        assert signing.verify(SECRET, signing.header(t, [digest], other_nonce), body, now=NOW) == signing.DENIED
    assert signing.verify(SECRET, signing.header(t, [digest]), body, now=NOW) == signing.DENIED  # nonce dropped


@settings(deadline=None)  # a shared box: a slow example is not a bug
@given(body=bodies, t=stamps, nonce=optional_nonces, data=st.data())
def test_any_bit_flip_in_the_digest_fails(body: bytes, t: int, nonce: str | None, data: st.DataObject) -> None:
    digest = bytes.fromhex(signing.digest(SECRET, body, t, nonce))
    flipped = _flip(digest, data.draw(st.integers(0, 255))).hex()
    assert signing.verify(SECRET, signing.header(t, [flipped], nonce), body, now=NOW) == signing.DENIED


def test_any_of_several_v1_values_may_match() -> None:
    header = signing.sign_with([b"old-secret", b"new-secret"], b"{}", NOW)
    assert header.count("v1=") == 2
    for secret in (b"old-secret", b"new-secret"):
        assert isinstance(signing.verify(secret, header, b"{}", now=NOW), Signature)
    assert signing.verify(b"third", header, b"{}", now=NOW) == signing.DENIED


def test_parts_may_come_in_any_order_and_unknown_schemes_are_ignored() -> None:
    digest = signing.digest(SECRET, b"x", NOW, "abcdefgh")
    header = f"v0=deadbeef, v1={digest}, n=abcdefgh, t={NOW}"
    assert isinstance(signing.verify(SECRET, header, b"x", now=NOW), Signature)


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("", "is not name=value"),
        ("garbage", "is not name=value"),
        ("v1=" + "a" * 64, "no `t`"),
        (f"t={NOW}", "no `v1`"),
        (f"t={NOW},v0=abc", "no `v1`"),
        (f"t=+{NOW},v1=" + "a" * 64, "digits only"),
        (f"t= {NOW}x,v1=" + "a" * 64, "digits only"),
        ("t=1_000,v1=" + "a" * 64, "digits only"),
        (f"t={NOW},t={NOW},v1=" + "a" * 64, "appears twice"),
        (f"t={NOW},n=short,v1=" + "a" * 64, "8-128 characters"),
        (f"t={NOW},n=has,comma,v1=" + "a" * 64, "8-128 characters"),
        (f"t={NOW},v1=" + "a" * 63, "64 hex digits"),
        (f"t={NOW},v1=" + "g" * 64, "64 hex digits"),
        (f"t={NOW}," + ",".join(["v1=" + "a" * 64] * 9), "more than 8"),
        ("t=1," + "x" * 3000, "longer than"),
    ],
)
def test_malformed_headers_say_what_was_expected(header: str, says: str) -> None:
    outcome = signing.parse(header)
    assert isinstance(outcome, AuthFailure) and outcome.code == "malformed"
    assert says in outcome.reason and "expected t=<unix seconds>" in outcome.reason


def test_timestamps_outside_the_window_are_stale() -> None:
    for t, word in ((NOW - 301, "old"), (NOW + 61, "future")):
        outcome = signing.verify(SECRET, signing.sign(SECRET, b"x", t), b"x", now=NOW)
        assert isinstance(outcome, AuthFailure) and outcome.code == "stale" and word in outcome.reason
    for t in (NOW - 300, NOW + 60):
        assert isinstance(signing.verify(SECRET, signing.sign(SECRET, b"x", t), b"x", now=NOW), Signature)
    assert isinstance(signing.verify(SECRET, signing.sign(SECRET, b"x", NOW - 1000), b"x", now=NOW,
                                     max_age_s=2000), Signature)


@settings(deadline=None)  # a shared box: a slow example is not a bug
@given(st.text(max_size=300))
def test_parse_never_raises(header: str) -> None:
    assert isinstance(signing.parse(header), Signature | AuthFailure)


def test_v2_covers_time_nonce_method_target_and_body() -> None:
    body = b'{"capability":"demo.echo","payload":{"text":"hi"}}'
    covered = b"1764590000.b1c7e2a4f0d94c55.POST./v1/envelopes." + body
    expected = hmac.new(b"rs_example", covered, hashlib.sha256).hexdigest()
    assert signing.sign_request(b"rs_example", method="post", target="/v1/envelopes", body=body, t=NOW,
                                nonce="b1c7e2a4f0d94c55") == f"t=1764590000,n=b1c7e2a4f0d94c55,v2={expected}"


def test_the_v2_examples_in_docs_http_md() -> None:
    body = b'{"capability":"demo.echo","payload":{"text":"hi"}}'
    assert signing.sign_request(b"rs_example", method="POST", target="/v1/envelopes", body=body, t=NOW,
                                nonce="b1c7e2a4f0d94c55") == (
        "t=1764590000,n=b1c7e2a4f0d94c55,v2=d4b4a64596bab1f5b4c7a44808d0b174659f4e260e7ff4b51a646c47d4858350")
    assert signing.sign_request(b"rs_example", method="GET", target="/v1/messages/m-1/events", body=b"", t=NOW,
                                nonce="0f6a55d2c3e84b1a") == (
        "t=1764590000,n=0f6a55d2c3e84b1a,v2=73b2bf63f261fe8a714610f6d59a0408de32bdd9fe0aeb6a6d04d34f423ca9f7")


@settings(deadline=None)  # a shared box: a slow example is not a bug
@given(body=bodies, t=stamps, nonce=nonces, method=st.sampled_from(["GET", "POST", "DELETE"]),
       path=st.sampled_from(["/v1/envelopes", "/v1/messages/m1", "/v1/traces/t1?x=1"]))
def test_v2_matches_only_its_own_method_and_target(body: bytes, t: int, nonce: str, method: str, path: str) -> None:
    sig = signing.parse(signing.sign_request(SECRET, method=method, target=path, body=body, t=t, nonce=nonce))
    assert isinstance(sig, Signature) and sig.v2 and not sig.digests
    assert signing.matches_request(SECRET, sig, method=method, target=path, body=body)
    assert not signing.matches_request(SECRET, sig, method="PUT", target=path, body=body)
    assert not signing.matches_request(SECRET, sig, method=method, target=path + "/x", body=body)
    assert not signing.matches(SECRET, sig, body), "a v2 digest is never taken for a v1 one"
