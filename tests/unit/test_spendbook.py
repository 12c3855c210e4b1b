"""The spend counts: each (scope, message_id, generation) counted once, also by a second book after a restart, in
the day and month of the receipt; keys of one scope share a Redis Cluster hash slot."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import fakeredis
import fakeredis.aioredis
import pytest

from reach.core.spend import Period, Spent
from reach.spendbook import (
    Charge,
    MemorySpendBook,
    RedisSpendBook,
    RedisSpendReader,
    app_scope,
    counter_key,
    seen_key,
    tenant_scope,
)

AT = int(datetime(2026, 12, 3, 10, tzinfo=UTC).timestamp() * 1000)
NEXT_DAY = AT + 24 * 3600 * 1000


def charge(mid: str, *, scope: str = "app:a1", gen: int = 0, at: int = AT, tokens: int = 150,
           cost: int = 1_000) -> Charge:
    return Charge(scope=scope, message_id=mid, generation=gen, at_ms=at, tokens=tokens, cost_micros=cost)


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


def spent(server: fakeredis.FakeServer, scope: str, now: int = AT) -> dict[Period, Spent]:
    reader = RedisSpendReader(fakeredis.aioredis.FakeRedis(server=server), namespace="ns")
    return asyncio.run(reader.spent(scope, [Period.DAY, Period.MONTH], now))


def test_a_charge_read_twice_counts_once_also_by_a_restarted_counter(server: fakeredis.FakeServer) -> None:
    first = RedisSpendBook(fakeredis.FakeRedis(server=server), namespace="ns")
    batch = [charge("m1"), charge("m2"), charge("m1")]  # m1's terminal republished within the batch
    assert first.record(batch) == 2
    # the counter crashed before its commit: a new one re-reads the same receipts
    again = RedisSpendBook(fakeredis.FakeRedis(server=server), namespace="ns")
    assert again.record(batch) == 0
    assert again.record([charge("m1", gen=1)]) == 1  # a replay is a new generation: counted
    assert spent(server, "app:a1") == {Period.DAY: Spent(450, 3_000), Period.MONTH: Spent(450, 3_000)}


def test_counts_fall_in_the_period_of_the_receipt(server: fakeredis.FakeServer) -> None:
    book = RedisSpendBook(fakeredis.FakeRedis(server=server), namespace="ns")
    book.record([charge("m1"), charge("m2", at=NEXT_DAY)])
    assert spent(server, "app:a1", AT)[Period.DAY] == Spent(150, 1_000)
    assert spent(server, "app:a1", NEXT_DAY) == {Period.DAY: Spent(150, 1_000), Period.MONTH: Spent(300, 2_000)}


def test_scopes_count_apart(server: fakeredis.FakeServer) -> None:
    book = RedisSpendBook(fakeredis.FakeRedis(server=server), namespace="ns")
    assert book.record([charge("m1", scope=app_scope("a1")), charge("m1", scope=tenant_scope("acme"))]) == 2
    assert spent(server, "tenant:acme")[Period.DAY] == Spent(150, 1_000)
    assert spent(server, "app:other")[Period.DAY] == Spent()


def test_the_keys_of_one_scope_share_a_hash_tag() -> None:
    keys = [seen_key("ns", "app:a1", "m1", 0), counter_key("ns", "app:a1", Period.DAY, AT),
            counter_key("ns", "app:a1", Period.MONTH, AT)]
    assert keys == ["ns:spend:{app:a1}:seen:m1:0", "ns:spend:{app:a1}:day:20261203", "ns:spend:{app:a1}:month:202612"]


def test_the_memory_twin_keeps_the_same_rule() -> None:
    book = MemorySpendBook()
    assert book.record([charge("m1"), charge("m1"), charge("m2", at=NEXT_DAY)]) == 2
    assert asyncio.run(book.spent("app:a1", [Period.DAY, Period.MONTH], NEXT_DAY)) == {
        Period.DAY: Spent(150, 1_000), Period.MONTH: Spent(300, 2_000)}


def test_on_a_cluster_each_charge_is_its_own_script_call_and_still_counted_once(server: fakeredis.FakeServer) -> None:
    class ClusterLike:
        """Not a one-node redis.Redis (redis-py's cluster pipeline refuses EVALSHA): the book calls per charge."""

        def __init__(self) -> None:
            self.inner = fakeredis.FakeRedis(server=server)

        def register_script(self, source: str) -> object:
            return self.inner.register_script(source)

    book = RedisSpendBook(ClusterLike(), namespace="ns")  # type: ignore[arg-type]
    assert book.record([charge("m1"), charge("m1"), charge("m2")]) == 2
    assert spent(server, "app:a1")[Period.DAY] == Spent(300, 2_000)
