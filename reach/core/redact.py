"""Secrets out of error texts (pure): the userinfo of every URL and the values of secret-looking query parameters.

A webhook endpoint may carry credentials (`https://user:pw@host/hook?token=...`); the endpoint comes back in
error texts (receipts, status rows, dead letters, the console, logs), which other people read. Every text a
channel writes about an endpoint goes through `redact`: `https://***@host/hook?token=***`.
"""

from __future__ import annotations

import re

MASK = "***"
SECRET_PARAMS = ("token", "key", "secret", "password", "passwd", "pwd", "sig", "signature", "auth", "credential",
                 "code", "session")
"""A query parameter is secret when its name contains one of these (case-insensitive): api_key, access_token..."""

_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^\s/?#@]*)@")
_PARAM = re.compile(r"(?P<name>[?&;](?P<key>[^\s=&#;?]*)=)(?P<value>[^\s&#;'\")>\]]*)")


def redact(text: str) -> str:
    """`text` with each URL's `user:password@` and each secret query parameter's value replaced by ***."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _PARAM.sub(_param, text)


def _param(match: re.Match[str]) -> str:
    key = match["key"].lower()
    if match["value"] and any(word in key for word in SECRET_PARAMS):
        return f"{match['name']}{MASK}"
    return match[0]
