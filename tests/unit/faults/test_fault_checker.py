"""The fault checker, fed synthetic receipt logs: a lost message, a double side effect, a double terminal and a
late identical terminal are each reported, and only where they happened."""

from __future__ import annotations

from reach.tooling.faults.checker import Seen, Sent, Window, check, parse_ledger

WINDOW = Window(start_ms=10_000, end_ms=12_000)


def _sent(n: int, *, at: int = 1_000, step: int = 1_000) -> list[Sent]:
    return [Sent(f"m{i}", at + i * step, acked=True) for i in range(n)]


def _done(mid: str, at: int, outcome: str = "r", status: str = "COMPLETED", generation: int = 0) -> list[Seen]:
    return [Seen(mid, generation, "ROUTED", at - 5), Seen(mid, generation, status, at, outcome)]


def test_a_clean_run_reports_nothing_wrong() -> None:
    sent = _sent(20)
    receipts = [r for s in sent for r in _done(s.message_id, s.sent_ms + 50)]
    ledger = [(s.message_id, 0) for s in sent]
    figures = check(sent, receipts, ledger, WINDOW)
    assert (figures.sent, figures.acked, figures.terminal) == (20, 20, 20)
    assert (figures.lost, figures.double_side_effects, figures.double_terminal, figures.late_terminal) == (0, 0, 0, 0)
    assert figures.p99_ms == 50.0
    assert figures.outcomes == {"COMPLETED": 20}


def test_an_acknowledged_message_without_a_terminal_receipt_is_lost() -> None:
    sent = _sent(3) + [Sent("unacked", 2_500, acked=False)]
    receipts = _done("m0", 1_100) + [Seen("m1", 0, "ROUTED", 2_100), Seen("m1", 0, "STARTED", 2_200)]
    figures = check(sent, receipts, [], WINDOW)
    assert figures.lost == 2, "m1 only started, m2 never showed; the unacknowledged one is not counted"
    assert (figures.sent, figures.acked, figures.terminal) == (4, 3, 1)
    assert figures.drained_s is None


def test_a_ledger_entry_twice_for_one_message_and_generation_is_a_double_side_effect() -> None:
    sent = _sent(3)
    receipts = [r for s in sent for r in _done(s.message_id, s.sent_ms + 10)]
    ledger = [("m0", 0), ("m1", 0), ("m1", 0), ("m2", 0), ("m2", 1)]  # m2 generation 1 is a replay: not double
    assert check(sent, receipts, ledger, WINDOW).double_side_effects == 1


def test_two_different_terminal_outcomes_are_a_double_terminal_and_an_identical_repeat_is_late() -> None:
    sent = _sent(3)
    receipts = (_done("m0", 1_100) + _done("m0", 1_900, status="FAILED")      # two outcomes: double
                + _done("m1", 2_100, "x") + _done("m1", 2_900, "y")           # two results: double
                + _done("m2", 3_100) + [Seen("m2", 0, "COMPLETED", 9_000, "r")])  # cached repeat: late
    figures = check(sent, receipts, [], WINDOW)
    assert figures.double_terminal == 2
    assert figures.late_terminal == 1
    assert figures.lost == 0
    assert figures.outcomes == {"COMPLETED": 3}, "the first terminal receipt of each message is its outcome"
    assert figures.examples["double_terminal"] == ["m0", "m1"]


def test_recovery_counts_from_the_fault_end_to_the_first_completion_of_new_traffic() -> None:
    sent = _sent(20)  # m0..m19 sent at 1 s .. 20 s; the fault is 10 s .. 12 s
    receipts = []
    for s in sent:
        stalled = WINDOW.start_ms <= s.sent_ms <= WINDOW.end_ms
        receipts += _done(s.message_id, (15_500 if stalled else s.sent_ms + 100))
    figures = check(sent, receipts, [], WINDOW)
    assert figures.recovery_s == 1.1, "m12, sent at 13 s, completed at 13.1 s"
    assert figures.drained_s == 3.5, "the messages of the fault window ended at 15.5 s"
    assert figures.p99_during_ms == 5_500.0
    assert figures.p99_after_ms == 100.0


def test_the_ledger_parser_skips_a_torn_line() -> None:
    assert parse_ledger(["m0 0 a\n", "m1 3 b\n", "m2", "m3 x"]) == [("m0", 0), ("m1", 3)]


def test_handlers_started_before_the_fault_and_ended_after_it_were_in_flight() -> None:
    sent = _sent(3, at=9_000, step=100)
    receipts = [Seen("m0", 0, "STARTED", 9_500), Seen("m0", 0, "COMPLETED", 9_600, "r"),   # done before
                Seen("m1", 0, "STARTED", 9_700), Seen("m1", 0, "COMPLETED", 14_000, "r"),  # in flight
                Seen("m2", 0, "STARTED", 9_800)]                                           # in flight, lost
    assert check(sent, receipts, [], WINDOW).in_flight == 2
