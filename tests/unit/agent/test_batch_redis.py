"""A batch of inbox records costs one Redis round trip for every claim in it and one for every ending (0056), on
the real Lua scripts (fakeredis runs them on lupa); the first-terminal register still keeps one ending each."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fakeredis import FakeAsyncRedis

from reach.agent.idempotency import Leases
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import Pipeline
from reach.records import Envelope, Status
from reach.terminals import result_key
from tests.unit.agent.fakes import FakeSender
from tests.unit.agent.test_pipeline import NAMES, agent_with, envelope

BATCH = 10


class CountingRedis(FakeAsyncRedis):
    """Counts the pipelines sent: each is one round trip (the scripts' batcher sends one per loop turn)."""

    pipelines = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        type(self).pipelines += 1
        return super().pipeline(*args, **kwargs)


def test_a_batch_costs_one_round_trip_for_its_claims_and_one_for_its_endings() -> None:
    async def handler(payload: Any) -> dict[str, int]:
        return {"n": payload["n"]}

    async def scenario() -> tuple[list[Outcome | None], int, list[Outcome | None], int, list[Any]]:
        redis = CountingRedis()
        leases = Leases(redis, namespace="ns", owner="i-1", result_ttl_s=60)
        pipe = Pipeline(agent_with(handler), publisher=sender, leases=leases, receipts_topic=NAMES.receipts,
                        executor=ThreadPoolExecutor(2), middleware=[])
        await pipe.process(envelope({"n": -1}), [])  # a fresh Redis loads the scripts (NOSCRIPT, then again) once
        CountingRedis.pipelines = 0
        first = await asyncio.gather(*(pipe.process(e, []) for e in batch))  # as the runner starts a batch
        ran = CountingRedis.pipelines
        CountingRedis.pipelines = 0
        again = await asyncio.gather(*(pipe.process(e, []) for e in batch))  # the batch redelivered
        registers = [await redis.get(result_key("ns", e.message_id, e.generation)) for e in batch]
        return ([p.outcome for p in first], ran, [p.outcome for p in again], CountingRedis.pipelines, registers)

    sender = FakeSender()
    batch: list[Envelope] = [envelope({"n": n}) for n in range(BATCH)]
    first, ran, again, republished, registers = asyncio.run(scenario())
    assert first == [Outcome.COMPLETE] * BATCH and again == [Outcome.COMPLETE] * BATCH
    assert ran == 2, "one round trip for the batch's claims, one for its endings"
    assert republished == 1, "a redelivered batch: one round trip, every claim answered from the register"
    mine = {e.message_id for e in batch}
    completed = [r for r in sender.receipts() if r.status is Status.COMPLETED and r.message_id in mine]
    assert len(completed) == 2 * BATCH and [r.timings.get("cache_hit") for r in completed[BATCH:]] == [1] * BATCH
    assert all(register is not None for register in registers), "every ending is in the first-terminal register"
