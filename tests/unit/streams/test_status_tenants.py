"""The status table's per-tenant index (reach.streams.status.tenants): each row's entry in its partition store, moved
by an update and removed with the row; a tenant's newest tasks read backwards; the page of the merged hits of every
worker, newest update first, filtered, with a cursor token; the `/tenants/<t>/tasks` view over two workers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from reach.streams.status import tenants
from reach.streams.status.store import PartitionStore
from tests.unit.streams.test_status_views import FakeOwners, Views


def row(mid: str, tenant: str, at: int, status: str = "STARTED", trace: str = "t") -> bytes:
    return json.dumps({"message_id": mid, "tenant": tenant, "updated_at": at, "status": status, "trace_id": trace,
                       "timeline": [{"at": at}]}).encode()


def test_a_rows_entry_moves_with_its_updates_and_goes_with_the_row(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0")
    store.write({"m1": row("m1", "acme", 10), "m2": row("m2", "acme", 20), "m3": row("m3", "globex", 30)})
    newest = [tenants.hit("acme", k, v) for k, v in store.newest(tenants.prefix("acme"), 10)]
    assert [(h.message_id, h.updated_at, h.status) for h in newest] == [("m2", 20, "STARTED"), ("m1", 10, "STARTED")]
    store.write({"m1": row("m1", "acme", 40, "COMPLETED")})
    newest = [tenants.hit("acme", k, v) for k, v in store.newest(tenants.prefix("acme"), 10)]
    assert [(h.message_id, h.status) for h in newest] == [("m1", "COMPLETED"), ("m2", "STARTED")]  # moved, not added
    assert len(store.newest(tenants.prefix("acme"), 1)) == 1  # bounded by the caller
    store.write({"m2": None})
    assert [tenants.hit("acme", k, v).message_id for k, v in store.newest(tenants.prefix("acme"), 10)] == ["m1"]
    assert [tenants.hit("globex", k, v).message_id for k, v in store.newest(tenants.prefix("globex"), 10)] == ["m3"]
    assert tenants.entries({"message_id": "x", "tenant": None}) == {}
    store.close()


def hits() -> list[tenants.Hit]:
    return [tenants.Hit(at, f"m{at}", "COMPLETED" if at % 2 else "STARTED", "chat" if at > 3 else "other")
            for at in range(1, 8)]


def test_a_page_is_newest_first_filtered_and_its_token_names_the_last_task_listed() -> None:
    first = tenants.page(hits(), tenants.Query(page_size=3))
    assert first.message_ids == ["m7", "m6", "m5"] and first.total_size == 7 and first.next_page_token
    second = tenants.page(hits(), tenants.Query(page_size=3, page_token=first.next_page_token))
    third = tenants.page(hits(), tenants.Query(page_size=3, page_token=second.next_page_token))
    assert second.message_ids == ["m4", "m3", "m2"] and third.message_ids == ["m1"] and third.next_page_token == ""
    done = tenants.page(hits(), tenants.Query(statuses=frozenset({"COMPLETED"}), context_id="chat", after_ms=5))
    assert done.message_ids == ["m7", "m5"] and done.total_size == 2
    assert tenants.page(hits(), tenants.Query(page_size=1_000)).page_size == tenants.MAX_PAGE
    assert tenants.page(hits(), tenants.Query()).page_size == tenants.DEFAULT_PAGE
    with pytest.raises(tenants.BadPageToken, match="next_page_token"):
        tenants.page(hits(), tenants.Query(page_token="%%%"))


class TenantFold:
    def __init__(self, found: list[tenants.Hit]) -> None:
        self.found = found

    def tenant_tasks(self, tenant: str) -> list[tenants.Hit]:
        return self.found if tenant == "acme" else []


def test_the_view_merges_every_workers_hits_into_one_page() -> None:
    mine, theirs = hits()[:4], hits()[4:]
    remote = {"http://other/tenants/acme/tasks?local=1": (200, {"hits": [h.as_list() for h in theirs]})}
    views = Views(remote, fold=TenantFold(mine), owners=FakeOwners({0: "http://me", 1: "http://other"}),  # type: ignore[arg-type]
                  partitions=2, url="http://me")
    code, body = asyncio.run(views.tenant_tasks("acme", tenants.Query(page_size=2)))
    assert code == 200 and body["message_ids"] == ["m7", "m6"] and body["total_size"] == 7
    code, local = asyncio.run(views.tenant_tasks("acme", None))
    assert code == 200 and [h[1] for h in local["hits"]] == ["m1", "m2", "m3", "m4"]
    views.answers["http://other/tenants/acme/tasks?local=1"] = (503, {})
    assert asyncio.run(views.tenant_tasks("acme", tenants.Query()))[0] == 503
    code, bad = asyncio.run(Views({}, fold=TenantFold(mine), owners=FakeOwners({0: "http://me"}),  # type: ignore[arg-type]
                                  partitions=1, url="http://me").tenant_tasks("acme", tenants.Query(page_token="x")))
    assert code == 400 and "page_token" in bad["message"]




def test_the_views_query_string_reads_as_a_query_and_bad_numbers_as_none() -> None:
    asked = tenants.query_of({"status": "COMPLETED,FAILED", "context": "c", "after": "5", "page_size": "x",
                              "page_token": ""})
    assert asked == tenants.Query(statuses=frozenset({"COMPLETED", "FAILED"}), context_id="c", after_ms=5, page_size=0)
    assert tenants.answer("acme", hits(), asked)[1]["message_ids"] == []  # the contexts are chat / other
