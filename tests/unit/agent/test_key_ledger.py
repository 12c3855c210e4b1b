"""Idempotency that survives Redis (issue 25 item 4), on the SDK fakes: a keyed COMPLETED run also goes to the key
ledger; a Redis that comes back empty (its memory began after the first run) or is out answers the same key from
the ledger, the handler never runs twice; a message created before Redis's memory began asks the status table.
While Redis's memory is older than the key's window the ledger is never asked."""

from __future__ import annotations

import asyncio
from typing import Any

from reach.agent.keyledger import MemoryKeyLedger, ledger_key
from reach.agent.memorymark import MemoryMark
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import Pipeline, key_scope
from reach.agent.statuscheck import AlreadyCompleted
from reach.envelopes import now_ms
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_business_idempotency import Counting, agent_for, completed, env, run_all
from tests.unit.agent.test_pipeline import pipeline

DAY_MS = 24 * 3600 * 1000


class Since:
    """A fixed start of Redis's memory."""

    def __init__(self, at_ms: int) -> None:
        self.at_ms = at_ms
        self.forgotten = 0

    async def since(self) -> int:
        return self.at_ms

    def known(self) -> None:  # never known beforehand: the pipeline awaits `since`
        return None

    def forget(self) -> None:
        self.forgotten += 1


def durable(handler: Counting, sender: FakeSender, leases: FakeLeases, ledger: MemoryKeyLedger, since: Since,
            **extra: Any) -> Pipeline:
    return pipeline(agent_for(handler), sender, leases, memory=since, ledger=ledger, **extra)


def kept(sender: FakeSender, ledger: MemoryKeyLedger) -> None:
    """What the broker keeps of the ledger records the pipeline sent."""
    for record in sender.on(ledger.topic):
        ledger.keep(record, now_ms())


def test_a_keyed_completed_run_is_on_the_ledger_and_a_wiped_redis_reuses_it() -> None:
    handler, sender, ledger = Counting(), FakeSender(), MemoryKeyLedger()
    first = env("order-42")
    run_all(durable(handler, sender, FakeLeases(), ledger, Since(now_ms() - DAY_MS * 2)), first)
    [record] = sender.on(ledger.topic)
    assert record.key == ledger_key(key_scope(first, None, lease_ms=1, now=now_ms()))  # type: ignore[arg-type]
    kept(sender, ledger)
    empty = FakeLeases()  # Redis came back empty: its memory began now
    second = env("order-42")
    assert run_all(durable(handler, sender, empty, ledger, Since(now_ms())), second) == [Outcome.COMPLETE]
    assert handler.runs == 1, "the side effect ran once"
    ran, reused = completed(sender)
    assert reused.message_id == second.message_id and reused.reused_from == first.message_id
    assert reused.result == ran.result
    assert list(empty.key_results.values()) == [record.value], "the key's result is back in Redis"
    assert not empty.keys and not empty.leases, "the key and the lease are free"
    third = env("order-42")
    asked = ledger.asked
    run_all(durable(handler, sender, empty, ledger, Since(now_ms())), third)
    assert handler.runs == 1 and ledger.asked == asked, "Redis answers the next one itself"


def test_redis_out_asks_the_ledger_too() -> None:
    handler, sender, ledger = Counting(), FakeSender(), MemoryKeyLedger()
    run_all(durable(handler, sender, FakeLeases(), ledger, Since(0)), env("order-7"))
    kept(sender, ledger)
    down = FakeLeases()
    down.down = True
    since = Since(0)
    assert run_all(durable(handler, sender, down, ledger, since), env("order-7")) == [Outcome.COMPLETE]
    assert handler.runs == 1 and since.forgotten == 1


def test_an_old_memory_never_asks_the_ledger_and_other_keys_run() -> None:
    handler, sender, ledger = Counting(), FakeSender(), MemoryKeyLedger()
    run_all(durable(handler, sender, FakeLeases(), ledger, Since(now_ms() - DAY_MS * 2)), env("a"), env(None))
    assert ledger.asked == 0 and handler.runs == 2
    assert len(sender.on(ledger.topic)) == 1, "only a keyed run costs a ledger record"
    run_all(durable(handler, sender, FakeLeases(), ledger, Since(now_ms())), env("b"))
    assert handler.runs == 3 and ledger.asked == 1, "a key the ledger does not know runs"


def test_failures_are_not_on_the_ledger() -> None:
    handler, sender, ledger = Counting(fail=True), FakeSender(), MemoryKeyLedger()
    assert run_all(durable(handler, sender, FakeLeases(), ledger, Since(0)), env("x")) == [Outcome.FAIL]
    assert sender.on(ledger.topic) == []


def test_a_message_created_before_redis_memory_began_asks_the_status_table() -> None:
    handler, sender = Counting(), FakeSender()
    asked: list[str] = []

    async def status(message_id: str, _generation: int) -> AlreadyCompleted | None:
        asked.append(message_id)
        return AlreadyCompleted(b'{"n":0}')

    old, young = env(None), env(None)
    since = Since(young.created_at)
    young = young.model_copy(update={"created_at": since.at_ms + 1})
    pipe = durable(handler, sender, FakeLeases(), MemoryKeyLedger(), since, completed=status)
    assert run_all(pipe, old.model_copy(update={"created_at": since.at_ms - 1}), young) == [Outcome.COMPLETE] * 2
    assert asked == [old.message_id] and handler.runs == 1
    assert [r.result for r in completed(sender)] == [b'{"n":0}', b'{"n":1}']
    assert [r.message_id for r in sender.receipts() if "started_at" in r.timings] == [young.message_id]  # ran


class FakeRedis:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads = 0

    async def set(self, key: str, value: str, *, nx: bool = False) -> bool:
        if nx and key in self.data:
            return False
        self.data[key] = value.encode()
        return True

    async def get(self, key: str) -> bytes | None:
        self.reads += 1
        return self.data.get(key)


def test_the_memory_mark_is_written_once_cached_and_read_again_after_a_failure() -> None:
    redis, ticks = FakeRedis(), [0.0]
    walls = iter([1_000, 2_000, 3_000])
    mark = MemoryMark(redis, namespace="ns", max_age_s=1.0, clock=lambda: ticks[0],  # type: ignore[arg-type]
                      wall=lambda: next(walls))

    async def go() -> list[int]:
        seen = [await mark.since(), await mark.since()]
        redis.data.clear()  # Redis came back empty
        seen.append(await mark.since())  # cached: a busy agent sees the failure, an idle one the age
        mark.forget()
        seen.append(await mark.since())
        ticks[0] = 5.0
        seen.append(await mark.since())
        return seen

    assert asyncio.run(go()) == [1_000, 1_000, 1_000, 2_000, 2_000]
    assert redis.reads == 3, "read when absent, after forget() and when older than max_age_s"


class SlowRedis(FakeRedis):
    """Each call takes a few loop turns, as a network round trip does; counts the calls in flight at once (each one
    a pooled connection redis-py opens when none is free, and keeps)."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0
        self.inflight = 0
        self.most = 0
        self.fail: Exception | None = None

    async def _turns(self) -> None:
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            if self.fail is not None:
                raise self.fail
        finally:
            self.inflight -= 1

    async def set(self, key: str, value: str, *, nx: bool = False) -> bool:
        self.sets += 1
        await self._turns()
        return await super().set(key, value, nx=nx)

    async def get(self, key: str) -> bytes | None:
        await self._turns()
        return await super().get(key)


def test_a_burst_of_handlers_shares_one_read_of_the_memory_mark() -> None:
    redis, ticks = SlowRedis(), [0.0]
    mark = MemoryMark(redis, namespace="ns", max_age_s=1.0, clock=lambda: ticks[0],  # type: ignore[arg-type]
                      wall=lambda: 1_000)

    async def go() -> list[int]:
        first = await asyncio.gather(*(mark.since() for _ in range(50)))
        ticks[0] = 5.0  # stale: the next burst reads it again, once
        return [*first, *await asyncio.gather(*(mark.since() for _ in range(50)))]

    assert asyncio.run(go()) == [1_000] * 100
    assert (redis.sets, redis.reads) == (2, 2), "one SET NX + GET per stale burst, not one per handler"
    assert redis.most == 1, "one Redis connection in use at a time"


def test_a_failed_shared_read_reaches_every_caller_and_the_next_call_reads_again() -> None:
    redis = SlowRedis()
    redis.fail = ConnectionError("redis down")
    mark = MemoryMark(redis, namespace="ns", max_age_s=1.0, wall=lambda: 1_000)  # type: ignore[arg-type]

    async def go() -> tuple[list[object], int]:
        failed = await asyncio.gather(*(mark.since() for _ in range(5)), return_exceptions=True)
        redis.fail = None
        return failed, await mark.since()

    failed, after = asyncio.run(go())
    assert [type(e) for e in failed] == [ConnectionError] * 5 and after == 1_000
    assert redis.sets == 2


def test_a_cancelled_caller_leaves_the_shared_read_to_the_others() -> None:
    redis = SlowRedis()
    mark = MemoryMark(redis, namespace="ns", max_age_s=1.0, wall=lambda: 1_000)  # type: ignore[arg-type]

    async def go() -> int:
        quitter, stayer = asyncio.ensure_future(mark.since()), asyncio.ensure_future(mark.since())
        await asyncio.sleep(0)
        quitter.cancel()
        return await stayer

    assert asyncio.run(go()) == 1_000 and redis.sets == 1


def test_the_kafka_ledger_keeps_what_this_process_records_once_loaded() -> None:
    from reach.agent.idempotency import KeyScope
    from reach.agent.keyledger import KafkaKeyLedger
    from reach.settings import KafkaSettings

    ledger = KafkaKeyLedger(topic="ns.idempotency", kafka=KafkaSettings(), capabilities=["test.idem"])
    scope = KeyScope(tenant="t1", capability="test.idem", key="k")
    record = ledger.record(scope, b"before-any-load")
    assert (record.topic, record.key) == ("ns.idempotency", f"test.idem {scope.digest}")
    ledger._loaded_for = 5  # as a load for the memory that began at 5 leaves it (no broker here)
    ledger.record(scope, b"completed")
    found = asyncio.run(ledger.completed(scope, now_ms=now_ms(), memory_since_ms=5))
    assert found == b"completed", "a resend during an outage finds it before the next load"
