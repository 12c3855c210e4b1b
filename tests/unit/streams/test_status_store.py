"""A status partition store: rows and their indexes move together, and the store survives a reopen."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from reach.core.lifecycle import StatusRow, fold
from reach.records import ErrorInfo, Receipt, Status
from reach.streams.status import keys
from reach.streams.status import store as store_module
from reach.streams.status.store import PartitionStore


def row(mid: str, *steps: tuple[Status, int], trace: str = "t1", **kw: object) -> bytes:
    out: StatusRow | None = None
    for status, at in steps:
        out = fold(out, Receipt(message_id=mid, trace_id=trace, tenant="d", capability="c", status=status, at=at,
                                deadline=10_000, delivery_timeout_ms=1_000, **kw))  # type: ignore[arg-type]
    assert out is not None
    return out.model_dump_json().encode()


def test_indexes_follow_the_row(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0")
    store.write({"m1": row("m1", (Status.ROUTED, 100)), "m2": row("m2", (Status.STARTED, 50))}, changelog_next=2)
    assert store.rows == 2 and store.changelog_next == 2
    assert store.timed(keys.DUE, 1_099) == [] and store.timed(keys.DUE, 1_100) == [(1_100, "m1")]
    assert [m for _, m in store.timed(keys.DUE, 10_000)] == ["m1", "m2"]  # m2: its deadline
    store.write({"m1": row("m1", (Status.ROUTED, 100), (Status.COMPLETED, 200))})
    assert [m for _, m in store.timed(keys.DUE, 10**12)] == ["m2"]
    assert store.timed(keys.TERMINAL, 199) == [] and store.timed(keys.TERMINAL, 200) == [(200, "m1")]
    assert sorted(store.trace("t1")) == [(50, "m2"), (100, "m1")] and store.trace("t2") == []
    store.write({"m1": None})
    assert store.get("m1") is None and store.timed(keys.TERMINAL, 10**12) == [] and store.rows == 1
    assert [m for _, m in store.trace("t1")] == ["m2"]


def test_no_route_letters_are_indexed_and_the_store_reopens(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p1")
    no_route = ErrorInfo(kind="NO_ROUTE", code="NO_ROUTE", message="nobody")
    store.write({"m3": row("m3", (Status.DEAD_LETTERED, 300), error=no_route)}, changelog_next=7)
    assert store.no_route(299) == [] and store.no_route(300) == ["m3"]
    store.close()
    again = PartitionStore(tmp_path / "p1")
    assert again.changelog_next == 7 and again.rows == 1 and again.get("m3")["status"] == "DEAD_LETTERED"
    again.destroy()
    assert PartitionStore(tmp_path / "p1").changelog_next is None


def test_reads_racing_a_close_see_the_rows_or_nothing(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p2")
    store.write({f"m{i}": row(f"m{i}", (Status.ROUTED, 100 + i)) for i in range(200)}, changelog_next=200)
    seen: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(50):
                seen.append(len(store.trace("t1")))
                seen.append(len(store.timed(keys.DUE, 10**12)))
                seen.append(int(store.get_raw("m7") is not None) * 200)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    store.close()
    for reader in readers:
        reader.join()
    assert errors == [] and set(seen) <= {0, 200}
    assert store.get_raw("m7") is None and store.trace("t1") == [] and store.timed(keys.DUE, 10**12) == []


def test_rows_in_memory_stay_within_two_write_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RocksDB's default 64 MiB write buffers let a store hold ~128 MiB of rows in memory before a flush (a soak read
    it as growth); the store's buffers are bounded (WRITE_BUFFER_BYTES, 8 MiB; 1 MiB here to keep the test short),
    so 6 MiB of row writes never keep much more than two in memory."""
    monkeypatch.setattr(store_module, "WRITE_BUFFER_BYTES", 1 << 20)
    store = PartitionStore(tmp_path / "p0")
    body = row("m", (Status.COMPLETED, 100), error=ErrorInfo(kind="AGENT", code="X", message="y" * 1_200))
    largest = 0
    for batch in range((6 << 20) // (500 * len(body)) + 1):
        store.write({f"m{batch}-{i}": body for i in range(500)})
        largest = max(largest, store._db.property_int_value("rocksdb.size-all-mem-tables") or 0)
    assert largest <= 3 << 20, largest  # two buffers and slack for a flush behind; the defaults: all 6 MiB
