"""Cancel records and the agent's side of them: the book (tenant-scoped, pruned), a message not started is
skipped CANCELED without running its handler, a running handler sees ctx.cancelled and may end it CANCELED."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from reach.agent import Canceled
from reach.agent.agent import Context
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import Pipeline
from reach.cancels import BadCancel, CancelBook, CancelRecord, decode
from reach.records import Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import NAMES, agent_with, envelope, statuses


def test_the_book_honours_the_messages_tenant_or_an_operator_and_forgets_after_the_window() -> None:
    book = CancelBook(window_ms=1_000)
    book.add(CancelRecord(message_id="m1", tenant="acme", at=0), now_ms=0)
    book.add(CancelRecord(message_id="m2", tenant=None, by="cli:ops", at=0), now_ms=0)
    assert book.cancelled("m1", "acme") and not book.cancelled("m1", "globex")  # another tenant cannot cancel
    assert book.cancelled("m2", "globex") and not book.cancelled("m3", "acme")
    for n in range(2_000):
        book.add(CancelRecord(message_id=f"x{n}", at=5_000), now_ms=5_000)
    assert not book.cancelled("m1", "acme") and len(book) == 2_000  # only the window's cancels are kept
    assert decode(CancelRecord(message_id="m1", at=1).encode()).message_id == "m1"
    with pytest.raises(BadCancel):
        decode(b"{not json")


def _pipeline(handler: Any, cancelled: set[str]) -> tuple[Pipeline, FakeSender]:
    sender = FakeSender()
    pipe = Pipeline(agent_with(handler), publisher=sender, leases=FakeLeases(), receipts_topic=NAMES.receipts,
                    executor=ThreadPoolExecutor(1), middleware=[],
                    cancelled=lambda mid, _tenant: mid in cancelled)
    return pipe, sender


def test_a_message_cancelled_before_it_started_is_canceled_and_its_handler_never_runs() -> None:
    ran: list[int] = []
    env = envelope()
    pipe, sender = _pipeline(lambda payload: ran.append(1), {env.message_id})
    assert asyncio.run(pipe.process(env, [])).outcome is Outcome.CANCEL
    assert ran == [] and statuses(sender) == [Status.CANCELED]
    [receipt] = sender.receipts()
    assert receipt.status.is_terminal and receipt.error is not None and receipt.error.code == "CANCELED"


def test_a_running_handler_sees_ctx_cancelled_and_raising_canceled_ends_it_canceled() -> None:
    cancelled: set[str] = set()
    env = envelope()

    async def handler(payload: Any, ctx: Context) -> Any:
        assert not ctx.cancelled
        cancelled.add(ctx.envelope.message_id)  # the cancel arrives while it runs
        if ctx.cancelled:
            raise Canceled("stopped")
        return payload

    pipe, sender = _pipeline(handler, cancelled)
    assert asyncio.run(pipe.process(env, [])).outcome is Outcome.CANCEL
    assert statuses(sender) == [Status.CANCELED]  # ended within the grace: no STARTED
