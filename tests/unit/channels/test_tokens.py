"""Reply tokens: minted and read back, refused when altered, foreign or expired."""

from __future__ import annotations

import pytest

from reach.channels.tokens import BadToken, ExpiredToken, ReplyClaims, mint, read, reply_url

SECRET = b"s3cret"
CLAIMS = ReplyClaims(message_id="m1-cb0", trace_id="t1", tenant="acme", expires_at=10_000, capability="demo.echo")


def test_a_minted_token_reads_back_its_claims() -> None:
    token = mint(SECRET, CLAIMS)
    assert read(SECRET, token, now=9_999) == CLAIMS
    assert CLAIMS.reply_id == "m1-cb0-re"
    assert reply_url("https://gw.example/", token) == f"https://gw.example/v1/callbacks/{token}"
    assert "/" not in token and "+" not in token and "=" not in token


def test_without_a_default_capability() -> None:
    claims = ReplyClaims(message_id="m", trace_id="t", tenant="acme", expires_at=5)
    assert read(SECRET, mint(SECRET, claims), now=0).capability is None


@pytest.mark.parametrize("token", ["", "nodot", ".", "abc.def", "a" * 3000 + ".x", "!!!.???"])
def test_garbage_is_a_bad_token(token: str) -> None:
    with pytest.raises(BadToken):
        read(SECRET, token, now=0)


def test_another_secret_or_an_altered_claim_is_a_bad_token() -> None:
    token = mint(SECRET, CLAIMS)
    with pytest.raises(BadToken):
        read(b"other", token, now=0)
    forged = mint(b"other", ReplyClaims(message_id="m1-cb0", trace_id="t1", tenant="evil", expires_at=10_000))
    body = forged.partition(".")[0]
    with pytest.raises(BadToken):
        read(SECRET, body + "." + token.partition(".")[2], now=0)


def test_an_expired_token_is_expired_not_unknown() -> None:
    with pytest.raises(ExpiredToken, match="m1-cb0"):
        read(SECRET, mint(SECRET, CLAIMS), now=10_000)
