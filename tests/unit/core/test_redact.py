"""Credentials out of error texts: URL userinfo and secret query parameters become ***."""

from __future__ import annotations

from reach.core.redact import redact


def test_userinfo_and_secret_parameters_are_masked_everywhere_in_a_text() -> None:
    text = ("cannot connect to https://alice:s3cr%40t@hooks.example.com:8443/x?a=1&api_key=abc&token=zz#f "
            "(then http://bob@other.example/?sig=1): [Errno 111]")
    assert redact(text) == ("cannot connect to https://***@hooks.example.com:8443/x?a=1&api_key=***&token=***#f "
                            "(then http://***@other.example/?sig=***): [Errno 111]")


def test_texts_without_secrets_are_unchanged() -> None:
    for text in ("http://h/x?q=1&page=2", "the provider answered 503; retrying", "ops@example.com", ""):
        assert redact(text) == text


def test_a_bad_callback_error_never_carries_the_password() -> None:
    from reach.channels.spec import parse

    try:
        parse("webhook:ftp://user:hunter2@example.com/hook")
    except ValueError as exc:
        assert "hunter2" not in str(exc) and "ftp://***@example.com" in str(exc)
    else:
        raise AssertionError("an ftp endpoint was accepted")
