"""`GET /messages/{id}` and `GET /traces/{id}` on any worker: answered from the local store, else forwarded."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import aiohttp

from reach.streams.status import tenants
from reach.streams.status.fold import StatusFold
from reach.streams.status.lookup import Owners, partition_of

FORWARDED = "x-reach-forwarded"
_WAIT_S = 5.0  # how long a lookup waits for a partition that is being recovered or reassigned
_INTERNAL = ("pending_reply",)


class StatusViews:
    """The lookups behind the HTTP views; `fold` is None in a routing-only worker."""

    def __init__(self, *, fold: StatusFold | None, owners: Owners, partitions: int, url: str,
                 wait_s: float = _WAIT_S, auth: dict[str, str] | None = None) -> None:
        self.fold = fold
        self.auth = auth or {}  # the shared token, when the workers' views require one (reach.streams.webauth)
        self.wait_s = wait_s
        self.owners = owners
        self.partitions = partitions
        self.url = url
        self._session: aiohttp.ClientSession | None = None

    async def message(self, message_id: str, forwarded: bool) -> tuple[int, dict[str, Any]]:
        """The row; a message served by its fallback shows the child's status (and its own fallback, down the
        chain) under `fallback` (the child's row may be on another worker; the parent's row names only its id)."""
        code, row = await self._row(message_id, forwarded)
        served = row.get("fallback") if code == 200 else None
        if forwarded or not isinstance(served, dict) or not served.get("message_id"):
            return code, row  # a forwarded lookup answers the row only: the worker asked first joins the chain
        child_code, child = await self.message(served["message_id"], False)
        if child_code == 200:
            row["fallback"] = {**served, "status": child["status"],
                               **({"fallback": child["fallback"]} if child.get("fallback") else {})}
        return code, row

    async def _row(self, message_id: str, forwarded: bool) -> tuple[int, dict[str, Any]]:
        partition = partition_of(message_id, self.partitions)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.wait_s
        fresh = False
        while True:
            if self.fold is not None and self.fold.owns(partition):
                raw = self.fold.raw_row(message_id)
                if raw is None:
                    return 404, {"error": "not_found", "message": f"No message {message_id!r} in the status "
                                 "table. Check the id, or it may be older than the retention period."}
                row = json.loads(raw)
                for name in _INTERNAL:
                    row.pop(name, None)
                return 200, row
            owner = (await self._owners(fresh)).get(partition)
            if owner and owner != self.url and not forwarded:
                return await self._get(f"{owner}/messages/{quote(message_id, safe='')}")
            if loop.time() > give_up:
                return 503, _unavailable(f"partition {partition} of the status table")
            fresh = True
            await asyncio.sleep(0.2)

    async def trace(self, trace_id: str, local_only: bool) -> tuple[int, dict[str, Any]]:
        hits = self.fold.trace(trace_id) if self.fold is not None else []
        if local_only:
            return 200, {"trace_id": trace_id, "hits": hits}
        code, bodies = await self._from_peers(f"/traces/{quote(trace_id, safe='')}?local=1")
        if code != 200:
            return code, bodies[0]
        hits += [(at, mid) for body in bodies for at, mid in body["hits"]]
        ids = list(dict.fromkeys(mid for _, mid in sorted(hits)))
        if not ids:
            return 404, {"error": "not_found", "message": f"No trace {trace_id!r}."}
        return 200, {"trace_id": trace_id, "message_ids": ids}

    async def tenant_tasks(self, tenant: str, query: tenants.Query | None) -> tuple[int, dict[str, Any]]:
        """A page of the tenant's tasks from every worker's index (query None: this worker's hits only)."""
        hits = list(self.fold.tenant_tasks(tenant)) if self.fold is not None else []
        if query is None:
            return 200, {"tenant": tenant, "hits": [h.as_list() for h in hits]}
        code, bodies = await self._from_peers(f"/tenants/{quote(tenant, safe='')}/tasks?local=1")
        if code != 200:
            return code, bodies[0]
        hits += [tenants.Hit(int(at), str(mid), str(st), str(trace))
                 for body in bodies for at, mid, st, trace in body["hits"]]
        return tenants.answer(tenant, hits, query)

    async def _from_peers(self, path: str) -> tuple[int, list[dict[str, Any]]]:
        """`path` answered by every other worker that owns a partition (200 and their bodies), or the first
        failure (its code and a one-body list with the error)."""
        code, owners = await self._all_owners()
        if code != 200:
            return code, [owners]
        bodies = []
        for url in sorted(set(owners.values()) - {self.url}):
            status, body = await self._get(f"{url}{path}")
            if status != 200:
                return 503, [_unavailable(f"the status worker at {url}")]
            bodies.append(body)
        return 200, bodies

    async def _all_owners(self) -> tuple[int, dict[Any, Any]]:
        """Every partition's owner, waiting up to wait_s for the ones being recovered or moved."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.wait_s
        fresh = False
        while True:
            owners = await self._owners(fresh)
            if set(owners) >= set(range(self.partitions)):
                return 200, owners
            if loop.time() > give_up:
                missing = sorted(set(range(self.partitions)) - set(owners))
                return 503, _unavailable(f"partitions {missing} of the status table")
            fresh = True
            await asyncio.sleep(0.2)

    async def _owners(self, fresh: bool) -> dict[int, str]:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, lambda: self.owners.owners(fresh=fresh))
        except Exception:  # noqa: BLE001 - the broker may be briefly unreachable: the caller waits and retries
            return {}

    async def _get(self, url: str) -> tuple[int, dict[str, Any]]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._session.get(url, headers={FORWARDED: "1", **self.auth}) as resp:
                body: dict[str, Any] = await resp.json(content_type=None)
                return resp.status, body
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            return 503, _unavailable(f"the status worker at {url} ({exc})")


def _unavailable(what: str) -> dict[str, Any]:
    return {"error": "unavailable", "message": f"{what} is being recovered or moved between workers; "
            "retry in a few seconds (`reach router` must be running with the status role somewhere)."}


def attach_status_views(app: Any, views: StatusViews) -> None:
    """Mount the views on the faust app's web server."""

    @app.page("/messages/{message_id}")
    async def message(web: Any, request: Any, message_id: str) -> Any:
        status, body = await views.message(message_id, forwarded=bool(request.headers.get(FORWARDED)))
        return web.json(body, status=status)

    @app.page("/tenants/{tenant}/tasks")
    async def tenant_tasks(web: Any, request: Any, tenant: str) -> Any:
        """`?status=A,B&context=&after=&page_size=&page_token=` (docs/a2a.md#methods, ListTasks)."""
        query = None if request.query.get("local") == "1" else tenants.query_of(request.query)
        status, body = await views.tenant_tasks(tenant, query)
        return web.json(body, status=status)

    @app.page("/traces/{trace_id}")
    async def trace(web: Any, request: Any, trace_id: str) -> Any:
        status, body = await views.trace(trace_id, local_only=request.query.get("local") == "1")
        return web.json(body, status=status)
