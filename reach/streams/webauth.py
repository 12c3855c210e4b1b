"""The stream app's views require a shared token (REACH_WEB_TOKEN) whenever they bind beyond loopback."""

from __future__ import annotations

import functools
import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from reach.errors import ConfigError
from reach.settings import ReachSettings

OPEN_PATHS = frozenset({"/healthz"})  # liveness carries no data; probes need it without a secret


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def required_token(settings: ReachSettings) -> str | None:
    """The token the views demand: None on loopback without one; ConfigError when bound wider without one."""
    token = settings.web_token.get_secret_value() if settings.web_token is not None else None
    if token is None and not is_loopback(settings.web_host):
        raise ConfigError(f"REACH_WEB_HOST={settings.web_host} exposes the stream app's views beyond this host; "
                          "set REACH_WEB_TOKEN to a shared secret (clients send `Authorization: Bearer <token>`), "
                          "or bind 127.0.0.1.")
    return token


def authorized(header: str | None, token: str) -> bool:
    """The header carries the token; a blank token authorizes nobody (fail closed, never `Bearer ` alone)."""
    if not token.strip():
        return False
    return hmac.compare_digest((header or "").encode(), f"Bearer {token}".encode())


class GuardedPages:
    """Stands in for the faust app where views are mounted: every page but OPEN_PATHS checks the token."""

    def __init__(self, app: Any, token: str | None) -> None:
        self._app = app
        self._token = token

    def page(self, path: str) -> Callable[[Callable[..., Any]], Any]:
        mount = self._app.page(path)
        token = self._token
        if token is None or path in OPEN_PATHS:
            return mount  # type: ignore[no-any-return]

        def decorate(handler: Callable[..., Any]) -> Any:
            @functools.wraps(handler)
            async def guarded(web: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
                if not authorized(request.headers.get("Authorization"), token):
                    return web.json({"error": "unauthorized", "message": "these views need "
                                     "`Authorization: Bearer <REACH_WEB_TOKEN>`"}, status=401)
                return await handler(web, request, *args, **kwargs)

            return mount(guarded)

        return decorate
