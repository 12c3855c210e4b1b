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


class StatusClient:
    """GET the stream app's views; a worker that does not answer reads as 503 (the caller may retry)."""

    def __init__(self, settings: ReachSettings, base_url: str | None = None, *, timeout_s: float = 10.0) -> None:
        self.base_url = (base_url or views_url(settings)).rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers=auth_headers(settings))

    async def message(self, message_id: str) -> tuple[int, dict[str, Any]]:
        if not message_id:  # `/messages/` is no view: its answer is not JSON, which would read as the views down
            return NO_ID
        return await self._get(f"/messages/{quote(message_id, safe='')}")

    async def trace(self, trace_id: str) -> tuple[int, dict[str, Any]]:
        if not trace_id:
            return NO_ID
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
