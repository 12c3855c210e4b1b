"""The status table's per-tenant index (pure): which tasks a tenant has, newest update first, for A2A ListTasks.

Each row of a tenant keeps one entry `a <tenant> \\0 <updated_at, 8 bytes big-endian> <message_id>` whose value is
`<status> \\0 <trace_id>`, so a tenant's tasks are one key range in every partition store, in update order, and the
status and context filters need no row read. The entry is derived from the row like the other indexes
(reach.streams.status.keys.index_entries): a row's update moves it, its deletion (retention) removes it, so the index
is bounded by the table. A lookup reads at most MAX_SCAN entries of a tenant per partition, newest first
(docs/a2a.md#methods: ListTasks sees a tenant's newest tasks)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = b"a"
MAX_SCAN = 2_000  # entries of one tenant read per partition per lookup
MAX_PAGE = 100
DEFAULT_PAGE = 50
_TIME = struct.Struct(">Q")


def prefix(tenant: str) -> bytes:
    return PREFIX + tenant.encode() + b"\x00"


def entries(row: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The row's entry in its tenant's index (none for a row without a tenant)."""
    tenant = row.get("tenant")
    if not tenant:
        return {}
    key = prefix(str(tenant)) + _TIME.pack(max(0, int(row.get("updated_at") or 0))) + str(row["message_id"]).encode()
    return {key: f"{row.get('status', '')}\x00{row.get('trace_id') or ''}".encode()}


@dataclass(frozen=True, slots=True)
class Hit:
    """One task of a tenant as the index knows it."""

    updated_at: int
    message_id: str
    status: str
    trace_id: str

    def as_list(self) -> list[Any]:
        return [self.updated_at, self.message_id, self.status, self.trace_id]


def hit(tenant: str, key: bytes, value: bytes) -> Hit:
    rest = key[len(prefix(tenant)):]
    status, _, trace = value.decode(errors="replace").partition("\x00")
    return Hit(_TIME.unpack_from(rest)[0], rest[_TIME.size:].decode(errors="replace"), status, trace)


@dataclass(frozen=True, slots=True)
class Query:
    """What ListTasks asks: statuses (reach statuses; empty: any), a context (trace), updated at or after, a page."""

    statuses: frozenset[str] = frozenset()
    context_id: str | None = None
    after_ms: int = 0
    page_size: int = DEFAULT_PAGE
    page_token: str = ""

    def matches(self, found: Hit) -> bool:
        return ((not self.statuses or found.status in self.statuses) and found.updated_at >= self.after_ms
                and (self.context_id is None or found.trace_id == self.context_id))


@dataclass(frozen=True, slots=True)
class Page:
    """The ids of one page, newest update first, the token of the next page ("" at the end) and how many matched."""

    message_ids: list[str]
    next_page_token: str
    total_size: int
    page_size: int


class BadPageToken(ValueError):
    """A page token this index did not make."""


def token(found: Hit) -> str:
    return base64.urlsafe_b64encode(f"{found.updated_at}:{found.message_id}".encode()).decode()


def _cursor(page_token: str) -> tuple[int, str] | None:
    if not page_token:
        return None
    try:
        at, _, mid = base64.urlsafe_b64decode(page_token.encode()).decode().partition(":")
        return int(at), mid
    except (ValueError, UnicodeDecodeError):
        raise BadPageToken(f"page_token {page_token[:60]!r} was not made by this server; pass the next_page_token "
                           "of the previous page, or none for the first") from None


def query_of(params: Mapping[str, str]) -> Query:
    """The Query of `/tenants/<t>/tasks?status=A,B&context=&after=&page_size=&page_token=`."""
    def number(name: str) -> int:
        text = params.get(name) or ""
        return int(text) if text.isdigit() else 0

    return Query(statuses=frozenset(s for s in (params.get("status") or "").split(",") if s),
                 context_id=params.get("context") or None, after_ms=number("after"), page_size=number("page_size"),
                 page_token=params.get("page_token") or "")


def answer(tenant: str, hits: Iterable[Hit], query: Query) -> tuple[int, dict[str, Any]]:
    """The view's answer: (200, the page) or (400, why the page token is refused)."""
    try:
        found = page(hits, query)
    except BadPageToken as exc:
        return 400, {"error": "bad_request", "message": str(exc)}
    return 200, {"tenant": tenant, "message_ids": found.message_ids, "next_page_token": found.next_page_token,
                 "total_size": found.total_size, "page_size": found.page_size}


def page(hits: Iterable[Hit], query: Query) -> Page:
    """The query's page of the merged hits of every partition: matches sorted by (update, id) descending, after
    the cursor the page token names (a task updated since moves above it: it is not listed twice)."""
    matched = sorted((h for h in hits if query.matches(h)), key=lambda h: (h.updated_at, h.message_id), reverse=True)
    cursor = _cursor(query.page_token)
    start = 0 if cursor is None else next((i for i, h in enumerate(matched) if (h.updated_at, h.message_id) < cursor),
                                          len(matched))
    size = query.page_size if 0 < query.page_size <= MAX_PAGE else (DEFAULT_PAGE if query.page_size <= 0
                                                                     else MAX_PAGE)
    chosen = matched[start:start + size]
    more = start + size < len(matched)
    return Page([h.message_id for h in chosen], token(chosen[-1]) if more and chosen else "", len(matched), size)
