"""The status table's answers for the gateway: the stream app's /messages and /traces views over async httpx."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from reach.settings import ReachSettings
from reach.webclient import auth_headers, views_url

NO_ID: tuple[int, dict[str, Any]] = (404, {"error": "not_found", "message": "no id was given",
                                           "hint": "name the message (or trace) by its id"})
UNROUTABLE_ID = frozenset("{}")  # the views' `{id}` route matches neither (aiohttp): their answer is a text 404


def addressable(key: str) -> bool:
    """Whether the views can be asked for `key` at all: not empty, UTF-8 (a JSON string may hold a lone surrogate),
    no `{` or `}`, and not `.` or `..` (path steps: `/messages/..` is the views' root, which answers 200). No id the
    bus makes is otherwise; asked anyway, the views' non-JSON answer read as them being down (a 503)."""
    if not key or key in (".", "..") or not UNROUTABLE_ID.isdisjoint(key):
        return False
    try:
        key.encode()
    except UnicodeEncodeError:
        return False
    return True


def absent(key: str) -> tuple[int, dict[str, Any]]:
    if not key:
        return NO_ID
    return 404, {"error": "not_found", "message": f"no message or trace {key[:100]!r}: no id of the bus looks so",
                 "hint": "name the message (or trace) by the id its send returned"}


class StatusClient:
    """GET the stream app's views; a worker that does not answer reads as 503 (the caller may retry)."""

    def __init__(self, settings: ReachSettings, base_url: str | None = None, *, timeout_s: float = 10.0) -> None:
        self.base_url = (base_url or views_url(settings)).rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers=auth_headers(settings))

    async def message(self, message_id: str) -> tuple[int, dict[str, Any]]:
        if not addressable(message_id):  # e.g. `/messages/`: no view, no JSON answer, which reads as the views down
            return absent(message_id)
        return await self._get(f"/messages/{quote(message_id, safe='')}")

    async def trace(self, trace_id: str) -> tuple[int, dict[str, Any]]:
        if not addressable(trace_id):
            return absent(trace_id)
        return await self._get(f"/traces/{quote(trace_id, safe='')}")

    async def tenant_tasks(self, tenant: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        return await self._get(f"/tenants/{quote(tenant, safe='')}/tasks", query)

    async def _get(self, path: str, query: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        try:
            resp = await self._http.get(path, params=dict(query or {}))
            body = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            return 503, {"error": "unavailable", "message": f"the status views at {self.base_url} do not answer "
                         f"({type(exc).__name__})", "hint": "retry in a few seconds; `reach router` must be running"}
        if not isinstance(body, dict):
            return 503, {"error": "unavailable", "message": "the status views answered something that is not an "
                         "object", "hint": "check REACH_GATEWAY_STATUS_URL"}
        if resp.status_code not in (200, 400, 404, 503):
            return 503, {"error": "unavailable", "message": f"the status views answered {resp.status_code}",
                         "hint": "check REACH_WEB_TOKEN and REACH_GATEWAY_STATUS_URL"}
        return resp.status_code, body

    async def aclose(self) -> None:
        await self._http.aclose()
