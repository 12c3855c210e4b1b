"""Routed lookups without a broker: local rows, forwarding to the owner, and 503 while nobody owns a key."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from reach.streams.status.lookup import partition_of
from reach.streams.status.views import StatusViews


class FakeFold:
    def __init__(self, owned: set[int], rows: dict[str, dict[str, Any]]) -> None:
        self.owned, self.rows = owned, rows

    def owns(self, partition: int) -> bool:
        return partition in self.owned

    def raw_row(self, message_id: str) -> bytes | None:
        row = self.rows.get(message_id)
        return json.dumps(row).encode() if row else None

    def trace(self, trace_id: str) -> list[tuple[int, str]]:
        return [(r["at"], m) for m, r in self.rows.items() if r.get("trace_id") == trace_id]


class FakeOwners:
    def __init__(self, owners: dict[int, str]) -> None:
        self.map = owners

    def owners(self, *, fresh: bool = False) -> dict[int, str]:
        return dict(self.map)


class Views(StatusViews):
    """Records forwarded requests instead of sending them."""

    def __init__(self, answers: dict[str, tuple[int, dict[str, Any]]], **kw: Any) -> None:
        super().__init__(**kw)
        self.answers, self.asked = answers, []

    async def _get(self, url: str) -> tuple[int, dict[str, Any]]:
        self.asked.append(url)
        return self.answers.get(url, (200, {"hits": []}))


def ids_by_partition(n: int = 4) -> dict[int, str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < n:
        found.setdefault(partition_of(f"m{i}", n), f"m{i}")
        i += 1
    return found


def test_a_local_row_is_answered_without_its_internal_fields_and_an_unknown_id_is_404() -> None:
    ids = ids_by_partition()
    fold = FakeFold({0}, {ids[0]: {"message_id": ids[0], "status": "COMPLETED", "pending_reply": "x"}})
    views = Views({}, fold=fold, owners=FakeOwners({0: "http://me"}), partitions=4, url="http://me")  # type: ignore[arg-type]
    assert asyncio.run(views.message(ids[0], forwarded=False)) == (200, {"message_id": ids[0], "status": "COMPLETED"})
    other = next(f"x{i}" for i in range(1000) if partition_of(f"x{i}", 4) == 0)
    assert asyncio.run(views.message(other, forwarded=False))[0] == 404


def test_a_key_owned_elsewhere_is_forwarded_once_and_nobody_owning_it_is_503() -> None:
    ids = ids_by_partition()
    answers = {f"http://other/messages/{ids[1]}": (200, {"status": "STARTED"})}
    views = Views(answers, fold=FakeFold({0}, {}), owners=FakeOwners({0: "http://me", 1: "http://other"}),  # type: ignore[arg-type]
                  partitions=4, url="http://me", wait_s=0.3)
    assert asyncio.run(views.message(ids[1], forwarded=False)) == (200, {"status": "STARTED"})
    assert asyncio.run(views.message(ids[1], forwarded=True))[0] == 503  # a forwarded request never hops again
    status, body = asyncio.run(views.message(ids[2], forwarded=False))
    assert status == 503 and body["error"] == "unavailable"


def test_a_trace_is_collected_from_every_status_worker_in_first_seen_order() -> None:
    ids = ids_by_partition()
    fold = FakeFold({0, 1}, {ids[0]: {"trace_id": "t", "at": 5}, ids[1]: {"trace_id": "t", "at": 1}})
    answers = {"http://other/traces/t?local=1": (200, {"trace_id": "t", "hits": [[3, ids[2]]]})}
    owners = FakeOwners({0: "http://me", 1: "http://me", 2: "http://other", 3: "http://other"})
    views = Views(answers, fold=fold, owners=owners, partitions=4, url="http://me")  # type: ignore[arg-type]
    assert asyncio.run(views.trace("t", local_only=False)) == (200, {"trace_id": "t",
                                                                     "message_ids": [ids[1], ids[2], ids[0]]})
    assert asyncio.run(views.trace("nope", local_only=False))[0] == 404


def test_an_id_is_escaped_when_forwarded_and_its_owner_answers_for_that_id() -> None:
    odd = next(f"../agents?x#y{i}" for i in range(1000) if partition_of(f"../agents?x#y{i}", 4) == 1)
    escaped = odd.replace("/", "%2F").replace("?", "%3F").replace("#", "%23")
    answers = {f"http://other/messages/{escaped}": (404, {"error": "not_found"}),
               "http://other/traces/..%2Fagents%3Fx%23y?local=1": (200, {"hits": [[1, odd]]})}
    owners = FakeOwners({0: "http://me", 1: "http://other", 2: "http://me", 3: "http://me"})
    views = Views(answers, fold=FakeFold({0, 2, 3}, {}), owners=owners, partitions=4, url="http://me")  # type: ignore[arg-type]
    assert asyncio.run(views.message(odd, forwarded=False)) == (404, {"error": "not_found"})
    assert asyncio.run(views.trace("../agents?x#y", local_only=False)) == (200, {"trace_id": "../agents?x#y",
                                                                                 "message_ids": [odd]})
    assert views.asked == [f"http://other/messages/{escaped}", "http://other/traces/..%2Fagents%3Fx%23y?local=1"]


def test_a_row_served_by_a_fallback_shows_the_childs_status_down_the_chain_and_a_forward_only_its_own() -> None:
    rows = {
        "p": {"message_id": "p", "status": "DEAD_LETTERED", "fallback": {"capability": "b", "message_id": "p-fb0"}},
        "p-fb0": {"message_id": "p-fb0", "status": "FAILED",
                  "fallback": {"capability": "c", "message_id": "p-fb0-fb0"}},
        "p-fb0-fb0": {"message_id": "p-fb0-fb0", "status": "COMPLETED"},
    }
    views = Views({}, fold=FakeFold({0}, rows), owners=FakeOwners({0: "http://me"}), partitions=1,  # type: ignore[arg-type]
                  url="http://me")
    code, row = asyncio.run(views.message("p", False))
    assert code == 200 and row["fallback"] == {"capability": "b", "message_id": "p-fb0", "status": "FAILED",
                                               "fallback": {"capability": "c", "message_id": "p-fb0-fb0",
                                                            "status": "COMPLETED"}}
    code, row = asyncio.run(views.message("p", True))  # the asking worker joins: a forwarded lookup answers the row
    assert row["fallback"] == rows["p"]["fallback"]
    rows["p"]["fallback"] = {"capability": "b", "message_id": "p-fb9"}  # sent, not folded yet
    assert asyncio.run(views.message("p", False))[1]["fallback"] == {"capability": "b", "message_id": "p-fb9"}
