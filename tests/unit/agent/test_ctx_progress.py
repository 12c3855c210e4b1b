"""ctx.progress / ctx.emit through the pipeline on in-memory seams: coalesced PROGRESS receipts before the
outcome, bad input raised to the handler, a refused PROGRESS receipt never the handler's failure."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.agent.outcomes import Outcome
from reach.agent.streaming import ProgressStream
from reach.core.progress import BadProgress, Coalescer
from reach.envelopes import new_envelope
from reach.records import Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import envelope, pipeline, run, statuses


def agent_with(handler: Any) -> Agent:
    agent = Agent("agent://test/unit", instance_id="i-1", lease_margin_ms=100)
    agent.capability("test.unit", version="1.0.0", input_schema={"type": "object"})(handler)
    return agent


def test_a_chatty_handler_is_coalesced_and_its_chunks_come_before_the_outcome() -> None:
    async def chatty(_p: Any, ctx: Context) -> str:
        for i in range(10_000):
            await ctx.emit(f"{i},")
            if i % 1000 == 0:
                await ctx.progress(i / 10_000, f"{i} done")
        return "ok"

    sender, leases = FakeSender(), FakeLeases()
    began = time.monotonic()
    assert run(pipeline(agent_with(chatty), sender, leases), envelope()) is Outcome.COMPLETE
    elapsed = time.monotonic() - began
    receipts = sender.receipts()
    assert [r.status for r in receipts][0] is Status.STARTED and receipts[-1].status is Status.COMPLETED
    progress = [r for r in receipts if r.status is Status.PROGRESS]
    assert 1 <= len(progress) <= elapsed / 0.1 + 2  # at most one per 100 ms, and the rest flushed at the end
    chunks = [c for r in progress for c in (r.progress.chunks if r.progress else [])]
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert "".join(c.data for c in chunks) == "".join(f"{i}," for i in range(10_000))
    assert progress[-1].progress is not None and progress[-1].progress.fraction == 0.9


def test_chunks_apart_by_more_than_the_interval_go_one_receipt_each() -> None:
    async def writer(_p: Any, ctx: Context) -> str:
        for word in ("a", "b", "c"):
            await ctx.emit(word)
            await asyncio.sleep(0.15)
        return "abc"

    sender, leases = FakeSender(), FakeLeases()
    assert run(pipeline(agent_with(writer), sender, leases), envelope()) is Outcome.COMPLETE
    progress = [r.progress for r in sender.receipts() if r.status is Status.PROGRESS]
    assert [[c.data for c in p.chunks] for p in progress if p] == [["a"], ["b"], ["c"]]


def test_bad_progress_raises_in_the_handler_and_the_worker_goes_on() -> None:
    seen: list[str] = []

    async def careless(_p: Any, ctx: Context) -> str:
        for bad in (lambda: ctx.progress(2.0), lambda: ctx.emit("x" * 40_000), lambda: ctx.emit({1, 2})):
            try:
                await bad()
            except BadProgress as exc:
                seen.append(str(exc))
        await ctx.emit("fine")
        return "done"

    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(careless), sender, leases)
    assert run(pipe, envelope()) is Outcome.COMPLETE
    assert len(seen) == 3 and "between 0 and 1" in seen[0] and "bytes" in seen[1] and "JSON" in seen[2]
    assert statuses(sender) == [Status.STARTED, Status.PROGRESS, Status.COMPLETED]
    assert run(pipe, envelope()) is Outcome.COMPLETE  # the next message runs as usual


def test_a_refused_or_unqueued_progress_receipt_is_not_the_handlers_failure() -> None:
    def refused(_receipt: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_exception(RuntimeError("the broker refused it"))
        return future

    def unqueued(_receipt: Any) -> Future[Any]:
        raise BufferError("queue full")

    for send, published in ((refused, 1), (unqueued, 0)):
        stream = ProgressStream(new_envelope("test.unit", {}), send=send, agent_id="a", instance_id="i")

        async def go(s: ProgressStream = stream) -> None:
            await s.emit("x")
            s.close()

        asyncio.run(go())  # no exception reaches the handler
        assert stream.published == published


def test_outside_the_sdk_the_context_checks_but_sends_nothing() -> None:
    ctx = Context(envelope=new_envelope("test.unit", {}), agent_id="a", instance_id="i")
    asyncio.run(ctx.emit("x"))
    with pytest.raises(BadProgress):
        asyncio.run(ctx.progress(-1))
    assert Coalescer().take(0) is None


def test_a_handler_held_back_by_a_full_buffer_still_gets_one_receipt_per_interval() -> None:
    # the chatty integration test found receipts a few ms apart: the timer armed before a back-pressure wait fired
    # right after the receipt the wait sent. Judged by the receipts' own `at` (the SDK's clock), every receipt but
    # the last (the flush before the outcome) is at least an interval after the one before. The stream's clock is
    # the event loop's own (injected), so its timers, waits and receipt times agree however loaded the machine is.
    sent: list[Any] = []

    def send(receipt: Any) -> Future[Any]:
        sent.append(receipt)
        done: Future[Any] = Future()
        done.set_result(None)
        return done

    async def chatty() -> None:
        loop = asyncio.get_running_loop()
        stream = ProgressStream(new_envelope("test.unit", {}), send=send, agent_id="a", instance_id="i",
                                coalescer=Coalescer(interval_ms=20, max_pending_bytes=64),
                                clock=lambda: int(loop.time() * 1000))
        for i in range(400):
            await stream.emit(f"token {i:04d};")
            if i % 50 == 0:
                await asyncio.sleep(0.025)  # a pause that lets an armed timer fire
        stream.close()

    asyncio.run(chatty())
    gaps = [b.at - a.at for a, b in zip(sent[:-1], sent[1:-1], strict=False)]
    assert len(sent) > 5 and min(gaps) >= 20, gaps
    assert "".join(c.data for r in sent for c in r.progress.chunks) == "".join(f"token {i:04d};" for i in range(400))
