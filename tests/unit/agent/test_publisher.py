"""Acks of several records: done once all are in, failed if any failed, whatever order they arrive in."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from reach.agent.exceptions import DeliveryFailed
from reach.agent.publisher import when_acked


def test_a_failed_ack_followed_by_a_good_last_ack_is_still_a_failure() -> None:
    letter: Future[Any] = Future()
    receipt: Future[Any] = Future()
    seen: list[BaseException | None] = []
    when_acked([letter, receipt], seen.append)
    letter.set_exception(DeliveryFailed("dlq: timed out"))
    assert seen == []
    receipt.set_result(None)
    assert len(seen) == 1 and isinstance(seen[0], DeliveryFailed)


def test_all_good_acks_are_done_once() -> None:
    acks: list[Future[Any]] = [Future(), Future()]
    seen: list[BaseException | None] = []
    when_acked(acks, seen.append)
    for ack in reversed(acks):
        ack.set_result(None)
    assert seen == [None]


def test_no_acks_is_done_at_once() -> None:
    seen: list[BaseException | None] = []
    when_acked([], seen.append)
    assert seen == [None]
