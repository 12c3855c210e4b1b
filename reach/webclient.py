"""A small HTTP client for the stream app's views (`reach status`, `reach trace`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from reach.errors import InfraUnavailable, ReachError
from reach.settings import ReachSettings


class NotFound(ReachError):
    """The stream app does not know the id (exit code 2)."""


def views_url(settings: ReachSettings) -> str:
    """Where the stream app's views answer: REACH_WEB_HOST (loopback when it binds every address) and port."""
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "::", "") else settings.web_host  # noqa: S104
    return f"http://{host}:{settings.web_port}"


def auth_headers(settings: ReachSettings) -> dict[str, str]:
    """The shared token the views require when they bind beyond loopback (REACH_WEB_TOKEN)."""
    if settings.web_token is None:
        return {}
    return {"Authorization": f"Bearer {settings.web_token.get_secret_value()}"}


def get_json(base_url: str, path: str, timeout: float = 10.0, *, auth: Mapping[str, str]) -> dict[str, Any]:
    """`path` of the views at `base_url`, sent with `auth` (`auth_headers(settings)`)."""
    url = base_url.rstrip("/") + path
    request = urllib.request.Request(url, headers=dict(auth))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - our own loopback URL
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read() or b"{}")
        except ValueError:
            body = {}
        if exc.code == 404:
            raise NotFound(body.get("message", f"{path} not found")) from None
        detail = f"The stream app answered {exc.code} for {url}: {body.get('message', 'no details')}"
        if exc.code == 503:  # the key's status partition is being recovered or moved between workers
            raise InfraUnavailable(detail) from None
        raise ReachError(detail) from None
    except (urllib.error.URLError, OSError) as exc:
        raise InfraUnavailable(
            f"The stream app does not answer at {base_url} ({exc}). Start it with `reach router`, "
            "or set REACH_WEB_PORT to its port."
        ) from None
