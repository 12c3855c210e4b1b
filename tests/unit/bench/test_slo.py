"""The knee step's criterion: 99.9% COMPLETED with created -> COMPLETED receipt p99 <= 100 ms."""

from __future__ import annotations

from typing import Any

from reach.tooling.bench.slo import ReceiptBook, judge


def receipt(mid: str, status: str, at: int) -> dict[str, Any]:
    return {"message_id": mid, "status": status, "at": at}


def book_of(n: int, *, late: int = 0, failed: int = 0, delay: int = 10) -> tuple[ReceiptBook, dict[str, int]]:
    created = {f"m-{i}": 1_000 * i for i in range(n)}
    book = ReceiptBook()
    for i, (mid, at) in enumerate(created.items()):
        book.add([receipt(mid, "ROUTED", at + 1), receipt(mid, "STARTED", at + 2)])
        if i < failed:
            book.add([receipt(mid, "FAILED", at + 3)])
        else:
            book.add([receipt(mid, "COMPLETED", at + (500 if i >= n - late else delay))])
    return book, created


def test_all_completed_fast_passes() -> None:
    book, created = book_of(2_000)
    verdict = judge(book, created)
    assert verdict.passed and verdict.completed == 2_000 and verdict.completed_fraction == 1.0
    assert verdict.latency is not None and verdict.latency.p99 == 10
    assert verdict.outcomes == {"COMPLETED": 2_000}


def test_one_in_a_thousand_failed_still_passes_two_do_not() -> None:
    assert judge(*book_of(1_000, failed=1)).passed
    verdict = judge(*book_of(1_000, failed=2))
    assert not verdict.passed and verdict.outcomes == {"FAILED": 2, "COMPLETED": 998}


def test_a_slow_p99_fails() -> None:
    assert judge(*book_of(1_000, late=10)).passed  # 1% late: p99 is still the fast ones
    assert not judge(*book_of(1_000, late=11)).passed


def test_messages_without_a_terminal_receipt_count_against_the_step() -> None:
    book, created = book_of(1_000)
    created = {**created, "m-lost-1": 0, "m-lost-2": 0}
    verdict = judge(book, created)
    assert not verdict.passed and verdict.messages == 1_002 and sum(verdict.outcomes.values()) == 1_000
    assert book.missing(created) == {"m-lost-1", "m-lost-2"}


def test_the_first_terminal_status_wins_and_repeats_are_counted() -> None:
    book = ReceiptBook()
    book.add([receipt("a", "ROUTED", 1), receipt("a", "COMPLETED", 5), receipt("a", "ROUTED", 7),
              receipt("a", "COMPLETED", 9), receipt("a", "FAILED", 11)])
    assert book.terminal == {"a": "COMPLETED"} and book.completed == {"a": 5} and book.routed == {"a": 1}
    assert book.duplicated == 2


def test_an_empty_step_fails() -> None:
    assert not judge(ReceiptBook(), {}).passed


def test_shed_requests_are_told_apart_from_other_failures() -> None:
    book = ReceiptBook()
    book.add([{"message_id": "a", "status": "FAILED", "at": 1, "error": {"kind": "OVERLOAD", "code": "OVERLOAD"}},
              {"message_id": "b", "status": "FAILED", "at": 1, "error": {"kind": "BUSINESS", "code": "X"}},
              {"message_id": "c", "status": "COMPLETED", "at": 1, "error": None}])
    assert book.overload == {"a"} and book.terminal == {"a": "FAILED", "b": "FAILED", "c": "COMPLETED"}
